package jobauth_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// TestSignedTokens: a node of a job signs in to the job's store once and
// its client then works with the token it signed itself (keys, a watch
// stream, a lease's keep-alive stream) without a password; a token signed
// with another job's key, for an older auth revision, or expired is
// refused by the store.
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
	signed, err := jobauth.SignIn(ctx, ccfg, token)
	if err != nil || signed == "" {
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

	rev, ok := jobauth.TokenRevision(signed)
	if !ok {
		t.Fatalf("the signed token %q names no auth revision", signed)
	}
	other, _ := rendezvous.NewToken()
	for _, tc := range []struct {
		name string
		tok  string
	}{
		{"another job's key", mustSign(t, jobauth.SignInKey(other), rev, time.Now().Add(time.Hour))},
		{"an older auth revision", mustSign(t, jobauth.SignInKey(token), rev-1, time.Now().Add(time.Hour))},
		{"expired", mustSign(t, jobauth.SignInKey(token), rev, time.Now().Add(-time.Minute))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			defer ccancel()
			_, err := client(tc.tok).Put(cctx, key, "forged")
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

func mustSign(t *testing.T, key []byte, rev uint64, exp time.Time) string {
	t.Helper()
	tok, err := jobauth.SignToken(key, rendezvous.EtcdUser, rev, exp)
	if err != nil {
		t.Fatal(err)
	}
	return tok
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
	token, _ := rendezvous.NewToken()
	if signed, err := jobauth.SignIn(ctx, ccfg, token); err != nil || signed != "" {
		t.Errorf("SignIn on a store of simple tokens = %q, %v; want none, and no error", signed, err)
	}
}
