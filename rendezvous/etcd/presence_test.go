package etcd

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/internal/testkit/nettest"
	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// TestPresenceEndsAGoneNodesLease: a node whose process is gone (its
// connections closed, its lease not revoked, as after a SIGKILL) loses
// its lease within the presence grace, not its TTL (60 s here); a live
// node whose connections are reset reconnects and keeps its lease.
func TestPresenceEndsAGoneNodesLease(t *testing.T) {
	t.Parallel()
	token, _ := rendezvous.NewToken()
	s, err := jobstore.StartServer(context.Background(), jobstore.ServerConfig{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() }) // after the agents' (cleanups run last first)
	proxy := nettest.NewProxy(t, s.Endpoints()[0])
	cfg := Config{Shape: shape("presence", 1, 2, 1), NodeRank: -1, LeaseTTL: time.Minute, Token: token, Presence: true}
	join := func(endpoint string) *agent {
		t.Helper()
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			TLS: mustClientTLS(t, token), Username: EtcdUser, Password: token.EtcdPassword()})
		if err != nil {
			t.Fatal(err)
		}
		c := cfg
		c.Addr, c.Log = "127.0.0.1", testLog(t)
		r, err := New(context.Background(), cli, c)
		if err != nil {
			cli.Close()
			t.Fatal(err)
		}
		a := &agent{cli: cli, r: r}
		t.Cleanup(func() {
			a.r.Close(context.Background())
			a.cli.Close()
		})
		return a
	}
	gone, live, watcher := join(s.Endpoints()[0]), join(proxy.Addr()), join(s.Endpoints()[0])
	ttl := func(a *agent) int64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := watcher.cli.TimeToLive(ctx, a.r.lease.Load().id)
		if err != nil {
			t.Fatal(err)
		}
		return resp.TTL
	}
	held := func(a *agent) bool {
		open, revoking := s.PresenceOf(a.r.lease.Load().id)
		return open == 1 && !revoking
	}
	waitFor(t, "both presences", func() bool { return held(gone) && held(live) })

	// A live node's connections are reset: it is back within the grace.
	proxy.Reset()
	waitFor(t, "the reset node's presence again", func() bool {
		open, revoking := s.PresenceOf(live.r.lease.Load().id)
		return !revoking && open == 1
	})
	if got := ttl(live); got <= 0 {
		t.Errorf("the reset node's lease ended (TTL %d): it was alive", got)
	}

	// The gone node: its process ends without a word.
	gone.r.stop()
	gone.r.lease.Load().ended()
	start := time.Now()
	waitFor(t, "the gone node's lease to end", func() bool { return ttl(gone) == -1 })
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the gone node's lease ended after %v; its TTL is %v", took, cfg.LeaseTTL)
	}
	if got := ttl(live); got <= 0 {
		t.Errorf("the live node's lease ended too (TTL %d)", got)
	}
}

// waitFor polls cond until it holds, for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("waited 30s for %s", what)
		}
	}
}

// TestPresenceStaysWithItsMember: in a store of three members, each
// counts presence on its own. A live agent whose presence connection to
// member 0 is reset reconnects to member 0, not to the next member
// (which would leave member 0's count at zero, and member 0 would end the
// lease of a live agent).
func TestPresenceStaysWithItsMember(t *testing.T) {
	// Not parallel, as the other tests of 3-member stores: three members'
	// raft beside the parallel tests' 1-s leases ended some of those.
	token := Token("gorun-presence-cluster-token-0123456789")
	servers, errs, clients := startCluster(t, []Token{token, token, token}, 30*time.Second)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	var proxies []*nettest.Proxy
	var endpoints []string
	for _, c := range clients {
		p := nettest.NewProxy(t, c)
		proxies, endpoints = append(proxies, p), append(endpoints, p.Addr())
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: mustClientTLS(t, token), Username: EtcdUser, Password: token.EtcdPassword()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	r, err := New(context.Background(), cli, Config{Shape: shape("presence-cluster", 1, 2, 1), NodeRank: -1, Addr: "127.0.0.1",
		LeaseTTL: time.Minute, Token: token, Presence: true, Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	id := r.lease.Load().id
	heldAt0 := func() bool {
		open, revoking := servers[0].PresenceOf(id)
		return open == 1 && !revoking
	}
	waitFor(t, "the presence at member 0", heldAt0)
	heldElsewhere := func() bool {
		for _, s := range servers[1:] {
			if n, _ := s.PresenceOf(id); n > 0 {
				return true
			}
		}
		return false
	}
	direct, err := clientv3.New(clientv3.Config{Endpoints: clients[1:], DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: mustClientTLS(t, token), Username: EtcdUser, Password: token.EtcdPassword()})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	alive := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := direct.TimeToLive(ctx, id)
		return err == nil && resp.TTL > 0
	}
	// What must not happen takes a window to see: three graces after
	// each reset, the lease is alive and no other member holds it.
	for range 3 {
		proxies[0].Reset()
		tick := time.NewTicker(20 * time.Millisecond)
		for end := time.Now().Add(3 * jobstore.PresenceGrace); time.Now().Before(end); <-tick.C {
			if heldElsewhere() {
				t.Fatal("the agent took its presence to another member after a reset")
			}
		}
		tick.Stop()
		if !alive() {
			t.Fatal("the live agent's lease ended after its presence connection was reset")
		}
		waitFor(t, "the presence at member 0 again", heldAt0)
	}
}

// TestPresenceRefusalIsLogged: a store that keeps no presence (an older
// gorun's: its client port offers h2 only) ends the node's attempts, and
// the node says so, naming the store and what it loses.
func TestPresenceRefusalIsLogged(t *testing.T) {
	t.Parallel()
	token, _ := rendezvous.NewToken()
	older, err := jobauth.ServerTLS(token)
	if err != nil {
		t.Fatal(err)
	}
	older.NextProtos = []string{"h2"}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", older)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	cfg, err := presenceTLS(token)
	if err != nil {
		t.Fatal(err)
	}
	var logged syncBuf
	log := logrus.New()
	log.SetOutput(&logged)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holdPresence(ctx, func() []string { return []string{ln.Addr().String()} }, cfg, 42, log) // returns once refused
	if ctx.Err() != nil {
		t.Fatal("holdPresence went on after the store refused presence")
	}
	if got := logged.String(); !strings.Contains(got, "keeps no presence") || !strings.Contains(got, ln.Addr().String()) {
		t.Errorf("log %q; want the refusal, naming the store", got)
	}
}
