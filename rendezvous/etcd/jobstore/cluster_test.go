package jobstore

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/rendezvous"
)

// startCluster starts the members of a store of len(tokens) members at
// once, member i with tokens[i], and returns them with their errors.
func startCluster(t *testing.T, tokens []rendezvous.Token, ready time.Duration) ([]*Server, []error, []string) {
	t.Helper()
	return startClusterAt(t, proctest.FreeAddrs(t, 2*len(tokens)), tokens, ready)
}

// startClusterAt is startCluster with the members' peer addresses, then
// their client addresses, in addrs.
func startClusterAt(t *testing.T, addrs []string, tokens []rendezvous.Token, ready time.Duration) ([]*Server, []error, []string) {
	t.Helper()
	peers, clients := addrs[:len(tokens)], addrs[len(tokens):]
	servers := make([]*Server, len(tokens))
	errs := make([]error, len(tokens))
	var wg sync.WaitGroup
	for i := range tokens {
		wg.Go(func() {
			servers[i], errs[i] = StartServer(context.Background(), ServerConfig{
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

// TestClusterSurvivesAMember: three members form one store with
// authentication on; with member 0 gone, the other two serve the job's
// user, with the data written before.
func TestClusterSurvivesAMember(t *testing.T) {
	token := rendezvous.Token("gorun-cluster-test-token-0123456789")
	start := time.Now()
	servers, errs, clients := startCluster(t, []rendezvous.Token{token, token, token}, 30*time.Second)
	t.Logf("three members serve after %v", time.Since(start))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func(user, password string) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: clients, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: mustClientTLS(t, token), Username: user, Password: password})
	}
	if anon, err := dial("", ""); err == nil {
		if _, err := anon.Put(ctx, DefaultPrefix+"/job/x", "v"); err == nil {
			t.Error("a client without the job's password wrote to the store")
		}
		anon.Close()
	}
	cli, err := dial(rendezvous.EtcdUser, token.EtcdPassword())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, DefaultPrefix+"/job/k", "before"); err != nil {
		t.Fatal(err)
	}
	members, err := cli.MemberList(ctx)
	if err != nil || len(members.Members) != 3 {
		t.Fatalf("members %v, %v; want 3", members, err)
	}
	closed := time.Now()
	servers[0].Close()
	t.Logf("member 0 closed in %v", time.Since(closed))
	defer func() { t.Logf("served again %v after member 0's close", time.Since(closed)) }()
	if _, err := cli.Put(ctx, DefaultPrefix+"/job/k2", "after"); err != nil {
		t.Fatalf("the two members left do not serve: %v", err)
	}
	r, err := cli.Get(ctx, DefaultPrefix+"/job/k")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "before" {
		t.Fatalf("get after losing member 0: %v, %v", r, err)
	}
}

// TestClusterOfHostNames: members named by host name (as a Slurm node
// list names them), not by address, form a store: etcd binds only
// addresses, so each member listens at its name's address and advertises
// the name.
func TestClusterOfHostNames(t *testing.T) {
	// This machine's name ("localhost" would not do: etcd takes that
	// one as an address).
	name, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.LookupHost(name); err != nil {
		t.Skipf("SKIPPED: this machine's name %q does not resolve: %v", name, err)
	}
	addrs := proctest.FreeAddrs(t, 6)
	for i, a := range addrs {
		addrs[i] = strings.Replace(a, "127.0.0.1:", name+":", 1)
	}
	token := rendezvous.Token("gorun-cluster-test-token-names-0123")
	_, errs, clients := startClusterAt(t, addrs, []rendezvous.Token{token, token, token}, 30*time.Second)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d at %s: %v", i, addrs[i], err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: clients, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: mustClientTLS(t, token), Username: rendezvous.EtcdUser, Password: token.EtcdPassword()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, DefaultPrefix+"/names", "ok"); err != nil {
		t.Fatalf("put through members named %v: %v", clients, err)
	}
}

// TestClusterRefusesAStranger: a member started with another token
// cannot join (the peers' TLS refuses it), and a TLS client without the
// job's certificate is refused at the peer port.
func TestClusterRefusesAStranger(t *testing.T) {
	token := rendezvous.Token("gorun-cluster-test-token-0123456789")
	other := rendezvous.Token("someone-elses-token-0123456789abc")
	servers, errs, _ := startCluster(t, []rendezvous.Token{token, token, other}, 5*time.Second)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("the job's members: %v, %v", errs[0], errs[1])
	}
	if errs[2] == nil {
		t.Fatal("a member with another token joined the store")
	}
	// The peer port refuses a TLS client without a certificate.
	peer := servers[0].etcd.Config().ListenPeerUrls[0].Host
	conn, err := tls.Dial("tcp", peer, &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Write([]byte("GET /members HTTP/1.1\r\nHost: x\r\n\r\n"))
		if err == nil {
			buf := make([]byte, 64)
			_, err = conn.Read(buf)
		}
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client without the job's certificate at the peer port: %v; want a TLS refusal", err)
	}
}

// TestClusterStartsWithoutMemberZero: two of three members are a
// majority: they start the store, authentication on, without member 0's
// host (it used to wait for member 0 to set up authentication, then fail).
func TestClusterStartsWithoutMemberZero(t *testing.T) {
	t.Parallel()
	token := rendezvous.Token("gorun-cluster-test-token-no-zero-01")
	addrs := proctest.FreeAddrs(t, 6)
	peers, clients := addrs[:3], addrs[3:]
	servers := make([]*Server, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for _, i := range []int{1, 2} {
		wg.Go(func() {
			servers[i], errs[i] = StartServer(context.Background(), ServerConfig{
				ClientAddr: clients[i], Token: token, Cluster: peers, Member: i, ReadyTimeout: 30 * time.Second,
			})
		})
	}
	wg.Wait()
	for _, i := range []int{1, 2} {
		if servers[i] != nil {
			t.Cleanup(func() { servers[i].Close() })
		}
		if errs[i] != nil {
			t.Fatalf("member %d: %v", i, errs[i])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: clients[1:], DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: mustClientTLS(t, token), Username: rendezvous.EtcdUser, Password: token.EtcdPassword()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, DefaultPrefix+"/job/k", "v"); err != nil {
		t.Fatalf("the job's user cannot write to the two members: %v", err)
	}
	anon, err := clientv3.New(clientv3.Config{Endpoints: clients[1:], DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: mustClientTLS(t, token)})
	if err == nil {
		defer anon.Close()
		if _, err := anon.Put(ctx, DefaultPrefix+"/job/x", "v"); err == nil {
			t.Error("a client without the job's password wrote to the store")
		}
	}
}

// TestClusterMemberWhosePlaceIsTaken: a member that comes back with no
// data (its agent was lost, its folder swept) finds the store went on
// without it: StartServer says ErrMemberTaken, which gorun store exits
// with MemberTakenExit for its agent to go on as a client.
func TestClusterMemberWhosePlaceIsTaken(t *testing.T) {
	token := rendezvous.Token("gorun-cluster-test-token-0123456789")
	addrs := proctest.FreeAddrs(t, 6)
	servers, errs, _ := startClusterAt(t, addrs, []rendezvous.Token{token, token, token}, 30*time.Second)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	if err := servers[2].Close(); err != nil {
		t.Fatal(err)
	}
	s, err := StartServer(context.Background(), ServerConfig{
		ClientAddr: addrs[5], Token: token, Cluster: addrs[:3], Member: 2, ReadyTimeout: 10 * time.Second,
	})
	if err == nil {
		s.Close()
		t.Fatal("a member with no data started again in its old place")
	}
	if !errors.Is(err, ErrMemberTaken) {
		t.Errorf("StartServer: %v; want ErrMemberTaken", err)
	}
}
