package jobstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"

	"github.com/gorun-dev/gorun/rendezvous"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestStoreGrowsToThreeMembers: a growable store of one member takes two
// more, each as a learner promoted once it caught up; the store then
// serves the job's user, with the data written before, after its first
// member is gone. A store that is not growable cannot add members.
func TestStoreGrowsToThreeMembers(t *testing.T) {
	token := rendezvous.Token("gorun-grow-test-token-0123456789")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addrs := proctest.FreeAddrs(t, 6)
	first, err := StartServer(ctx, ServerConfig{ClientAddr: addrs[0], PeerAddr: addrs[1], Token: token, Growable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addrs[0]}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: mustClientTLS(t, token), Username: rendezvous.EtcdUser, Password: token.EtcdPassword()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, DefaultPrefix+"/job/k", "before"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		client, peer := addrs[2*i], addrs[2*i+1]
		id, initial, err := first.AddLearner(ctx, MemberName(i), peer)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		m, err := StartServer(ctx, ServerConfig{ClientAddr: client, PeerAddr: peer, Token: token, Join: initial, Name: MemberName(i)})
		if err != nil {
			t.Fatalf("member %d joining %s: %v", i, initial, err)
		}
		t.Cleanup(func() { m.Close() })
		if err := first.Promote(ctx, id); err != nil {
			t.Fatal(err)
		}
		t.Logf("member %d voting %v after its start", i, time.Since(start))
	}
	members, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	voting := 0
	for _, m := range members.Members {
		if !m.IsLearner {
			voting++
		}
	}
	if voting != 3 {
		t.Fatalf("members %v; want 3 voting", members.Members)
	}
	cli.SetEndpoints(addrs[0], addrs[2], addrs[4])
	first.Close()
	if _, err := cli.Put(ctx, DefaultPrefix+"/job/k2", "after"); err != nil {
		t.Fatalf("the two members left do not serve: %v", err)
	}
	r, err := cli.Get(ctx, DefaultPrefix+"/job/k")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "before" {
		t.Fatalf("get after losing the first member: %v, %v", r, err)
	}
	plain, err := StartServer(ctx, ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, _, err := plain.AddLearner(ctx, MemberName(1), addrs[3]); err == nil {
		t.Error("a store that is not growable added a member")
	}
}

// TestMembersStopTogetherAtOnce: at a job's end every member stops at
// about the same time; a leader that first handed its leadership over
// waited for a member that was stopping too, up to etcd's request timeout
// (6 s), and held its agent's exit that long. Members stop without the
// hand-over, so each Close returns well within that.
func TestMembersStopTogetherAtOnce(t *testing.T) {
	token := rendezvous.Token("gorun-stop-test-token-0123456789")
	servers, errs, _ := startCluster(t, []rendezvous.Token{token, token, token}, 30*time.Second)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	took := make([]time.Duration, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			start := time.Now()
			s.Close()
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, d := range took {
		if d > 5*time.Second {
			t.Errorf("member %d took %v to stop; want well within etcd's 6 s hand-over timeout", i, d)
		}
	}
	t.Logf("stop times: %v", took)
}
