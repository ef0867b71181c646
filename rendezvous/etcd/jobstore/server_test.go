package jobstore

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
)

func TestServerStartsAndServes(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	s, err := StartServer(ctx, ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("embedded etcd ready in %v at %v", time.Since(start), s.Endpoints())
	defer s.Close()
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, "k")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("get = %v, %v", r, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestServerWithTokenRefusesStrangers: with a token, the embedded etcd
// answers only the job's user, and only under the job's prefix.
func TestServerWithTokenRefusesStrangers(t *testing.T) {
	t.Parallel()
	token, _ := rendezvous.NewToken()
	s, err := StartServer(context.Background(), ServerConfig{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The job's TLS proves the token holder; the password is still needed.
	dial := func(user, password string) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second, Username: user, Password: password, Logger: zap.NewNop(),
			TLS: mustClientTLS(t, token)})
	}
	anon, err := dial("", "")
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Put(ctx, DefaultPrefix+"/job/ctl/outcome", "failed: forged"); err == nil {
		t.Error("a client without credentials wrote a job key")
	}
	if _, err := anon.Get(ctx, DefaultPrefix+"/", clientv3.WithPrefix()); err == nil {
		t.Error("a client without credentials read the job's keys")
	}
	for _, c := range []struct{ user, password string }{{rendezvous.EtcdUser, "wrong"}, {"root", ""}, {"root", "root"}} {
		if cli, err := dial(c.user, c.password); err == nil {
			_, err = cli.Get(ctx, "x")
			cli.Close()
			if err == nil {
				t.Errorf("user %q with password %q was let in", c.user, c.password)
			}
		}
	}
	job, err := dial(rendezvous.EtcdUser, token.EtcdPassword())
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	if _, err := job.Put(ctx, DefaultPrefix+"/job/ctl/x", "v"); err != nil {
		t.Errorf("the job's user cannot write under %s: %v", DefaultPrefix, err)
	}
	for _, key := range []string{"/elsewhere", DefaultPrefix + "-other/x", DefaultPrefix} {
		if _, err := job.Put(ctx, key, "v"); err == nil {
			t.Errorf("the job's user wrote %s, outside its prefix %s/", key, DefaultPrefix)
		}
	}
	if _, err := job.UserAdd(ctx, "evil", "evil"); err == nil {
		t.Error("the job's user added a user")
	}
}

// mustClientTLS is the job's client TLS for token.
func mustClientTLS(t *testing.T, token rendezvous.Token) *tls.Config {
	t.Helper()
	cfg, err := jobauth.ClientTLS(token)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
