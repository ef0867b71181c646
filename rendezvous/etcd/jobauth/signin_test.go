package jobauth_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// TestSignedTokens: a node of a job logs in to the job's store once and
// its client then works with the token the store issued (keys, a watch
// stream, a lease's keep-alive stream) without a password. The store, of
// one member, signs with a key of its own: a token signed with the key a
// holder of the job token can derive (for the job's user, or for root)
// is refused, and so is one signed with another job's key.
func TestSignedTokens(t *testing.T) {
	t.Parallel()
	token, _ := rendezvous.NewToken()
	s, err := jobstore.StartServer(context.Background(), jobstore.ServerConfig{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tlsCfg, err := jobauth.ClientTLS(token)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop(), TLS: tlsCfg,
		Username: rendezvous.EtcdUser, Password: token.EtcdPassword()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	signed, err := jobauth.SignIn(ctx, ccfg)
	if err != nil || strings.Count(signed, ".") != 2 {
		t.Fatalf("SignIn = %q, %v; want a signed token", signed, err)
	}
	// client presents tok and no password.
	client := func(tok string) *clientv3.Client {
		t.Helper()
		c := ccfg
		c.Username, c.Password, c.Token = "", "", tok
		cli, err := clientv3.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	cli := client(signed)
	key := jobstore.DefaultPrefix + "/signed/key"
	watch := cli.Watch(ctx, key)
	lease, err := cli.Grant(ctx, 10)
	if err != nil {
		t.Fatalf("grant with the signed token: %v", err)
	}
	if _, err := cli.KeepAliveOnce(ctx, lease.ID); err != nil {
		t.Fatalf("keep-alive with the signed token: %v", err)
	}
	if _, err := cli.Put(ctx, key, "v", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatalf("put with the signed token: %v", err)
	}
	select {
	case wr := <-watch:
		if wr.Err() != nil || len(wr.Events) != 1 {
			t.Fatalf("watch with the signed token: %v %v", wr.Err(), wr.Events)
		}
	case <-ctx.Done():
		t.Fatal("the watch saw no put")
	}

	rev := revisionOf(t, signed)
	other, _ := rendezvous.NewToken()
	for _, tc := range []struct {
		name string
		tok  string
	}{
		{"the job's derivable key, for root", sign(t, jobauth.SignInKey(token), "root", rev)},
		{"the job's derivable key, for the job's user", sign(t, jobauth.SignInKey(token), rendezvous.EtcdUser, rev)},
		{"another job's key", sign(t, jobauth.SignInKey(other), rendezvous.EtcdUser, rev)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			defer ccancel()
			_, err := client(tc.tok).Put(cctx, "/outside", "forged")
			if err == nil || !strings.Contains(err.Error(), "auth") {
				t.Errorf("put with a token signed with %s: %v; want it refused", tc.name, err)
			}
		})
	}
	got, err := cli.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
		t.Errorf("the key after the forged puts: %v, %v; want v", got, err)
	}
}

// sign is a token etcd would accept from a store whose key is key: user
// at auth revision rev, for an hour.
func sign(t *testing.T, key []byte, user string, rev uint64) string {
	t.Helper()
	claims, err := json.Marshal(map[string]any{"username": user, "revision": rev, "exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding
	body := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString(claims)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	return body + "." + enc.EncodeToString(m.Sum(nil))
}

// revisionOf is the auth revision a signed token names.
func revisionOf(t *testing.T, token string) uint64 {
	t.Helper()
	parts := strings.Split(token, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Revision uint64 }
	if err := json.Unmarshal(payload, &c); err != nil || c.Revision == 0 {
		t.Fatalf("token names no revision: %s (%v)", payload, err)
	}
	return c.Revision
}

// TestPasswordStoreKeepsSimpleTokens: a store given a password and no
// job token (--standalone's, for Go workers) keeps etcd's own tokens: its
// user logs in with the password, and SignIn, which has no key to sign
// with, says to do so.
func TestPasswordStoreKeepsSimpleTokens(t *testing.T) {
	t.Parallel()
	password := strings.Repeat("ab", 32)
	s, err := jobstore.StartServer(context.Background(), jobstore.ServerConfig{Password: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ccfg := clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		Username: rendezvous.EtcdUser, Password: password}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(ccfg)
	if err != nil {
		t.Fatalf("log in with the password: %v", err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, jobstore.DefaultPrefix+"/k", "v"); err != nil {
		t.Fatalf("put as the job's user: %v", err)
	}
	if signed, err := jobauth.SignIn(ctx, ccfg); err != nil || signed != "" {
		t.Errorf("SignIn on a store of simple tokens = %q, %v; want none, and no error", signed, err)
	}
}
