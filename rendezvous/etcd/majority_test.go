package etcd

import (
	"context"
	"crypto/tls"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// startCluster starts the members of a store of len(tokens) members at
// once, member i with tokens[i], and returns them with their errors and
// their client addresses.
func startCluster(t *testing.T, tokens []Token, ready time.Duration) ([]*jobstore.Server, []error, []string) {
	t.Helper()
	addrs := proctest.FreeAddrs(t, 2*len(tokens))
	peers, clients := addrs[:len(tokens)], addrs[len(tokens):]
	servers := make([]*jobstore.Server, len(tokens))
	errs := make([]error, len(tokens))
	var wg sync.WaitGroup
	for i := range tokens {
		wg.Go(func() {
			servers[i], errs[i] = jobstore.StartServer(context.Background(), jobstore.ServerConfig{
				ClientAddr: clients[i], Token: tokens[i], Cluster: peers, Member: i, ReadyTimeout: ready,
			})
		})
	}
	wg.Wait()
	for _, s := range servers {
		if s != nil {
			t.Cleanup(func() { s.Close() })
		}
	}
	return servers, errs, clients
}

// mustClientTLS is the job's client TLS for token.
func mustClientTLS(t *testing.T, token Token) *tls.Config {
	t.Helper()
	cfg, err := jobauth.ClientTLS(token)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestFailEndsWithoutAMajority: a node reports its workers' failure to a
// member whose peers are gone: the member cannot answer (no leader), and
// Fail returns an error once the store may no longer stay unreachable,
// instead of waiting forever (a hang the chaos suite found).
func TestFailEndsWithoutAMajority(t *testing.T) {
	token := Token("gorun-cluster-test-token-0123456789")
	servers, errs, clients := startCluster(t, []Token{token, token, token}, 30*time.Second)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: clients[2:], DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: mustClientTLS(t, token), Username: EtcdUser, Password: token.EtcdPassword()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, err := New(ctx, cli, Config{Shape: shape(t.Name(), 1, 1, 1), NodeRank: -1, Addr: "127.0.0.1", Log: testLog(t), Token: token, UnreachableTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	round, err := r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
	if err != nil {
		t.Fatal(err)
	}
	servers[0].Close()
	servers[1].Close()
	start := time.Now()
	if _, err := r.Fail(ctx, round, "rank 0 failed", 1, true); err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "did not answer within 3s") {
		t.Fatalf("Fail = %v after %v; want it to give up after the unreachable timeout", err, time.Since(start))
	}
}
