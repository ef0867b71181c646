package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/rendezvous"
)

func TestOrderMembers(t *testing.T) {
	node := func(id string, asked, prev int, rev int64) NodeRecord {
		return NodeRecord{ID: id, NodeRank: asked, PrevRank: prev, Revision: rev}
	}
	tests := []struct {
		name  string
		nodes []NodeRecord
		max   int
		want  string // ids in group-rank order
	}{
		{"arrival order", []NodeRecord{node("b", -1, -1, 9), node("a", -1, -1, 5)}, 4, "a b"},
		{"asked ranks are given", []NodeRecord{node("x", 2, -1, 1), node("y", 0, -1, 2), node("z", 1, -1, 3)}, 3, "y z x"},
		{"an asked rank among new nodes", []NodeRecord{node("x", 2, -1, 1), node("p", -1, -1, 2), node("q", -1, -1, 3)}, 3, "p q x"},
		{"survivors keep their order before new nodes", []NodeRecord{node("new", -1, -1, 1), node("s1", -1, 1, 7), node("s0", -1, 0, 8)}, 3, "s0 s1 new"},
		{"a gap: rank 2 of a 2-node round fills the free rank", []NodeRecord{node("r0", 0, 0, 1), node("r2", 2, 2, 2)}, 3, "r0 r2"},
		{"gaps keep the asked order", []NodeRecord{node("r3", 3, -1, 1), node("r1", 1, -1, 2), node("r5", 5, -1, 3)}, 6, "r3 r1 r5"},
		{"beyond max, the last in order wait", []NodeRecord{node("a", -1, -1, 1), node("b", -1, -1, 2), node("k", 1, -1, 3)}, 2, "a k"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ids []string
			for _, n := range orderMembers(tt.nodes, tt.max) {
				ids = append(ids, n.ID)
			}
			if got := strings.Join(ids, " "); got != tt.want {
				t.Errorf("order = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestAdmitKeepsFirstAskerOfARank(t *testing.T) {
	nodes := []NodeRecord{
		{ID: "late", NodeRank: 1, Revision: 9},
		{ID: "free", NodeRank: -1, Revision: 3},
		{ID: "early", NodeRank: 1, Revision: 4},
		{ID: "other", NodeRank: 0, Revision: 5},
	}
	var ids []string
	for _, n := range admit(nodes) {
		ids = append(ids, n.ID)
	}
	if got := strings.Join(ids, " "); got != "free early other" {
		t.Errorf("admit = %q; want the later asker of rank 1 left out", got)
	}
}

func TestDuplicateNodeRankRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	job := shape(t.Name(), 2, 2, 1)
	cfg := func(rank int) Config { return Config{Shape: job, NodeRank: rank, LeaseTTL: 2 * time.Second} }
	first, err := newAgent(t, cfg(0))
	if err != nil {
		t.Fatal(err)
	}
	rounds := make(chan rendezvous.Round, 1)
	go func() {
		r, err := first.r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
		if err != nil {
			t.Error(err)
		}
		rounds <- r
	}()
	waitForKey(t, first, first.r.k.nodeRank(0, 0))
	dup, err := newAgent(t, cfg(0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = dup.r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
	if !errors.Is(err, rendezvous.ErrInvalidNode) || !strings.Contains(err.Error(), "NodeRank=0 is already taken by node "+first.r.ID()) {
		t.Fatalf("second node with --node-rank=0: Next = %v; want it refused, naming the holder", err)
	}
	// The refused node was never counted: the round still needs rank 1.
	second, err := newAgent(t, cfg(1))
	if err != nil {
		t.Fatal(err)
	}
	r1, err := second.r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
	if err != nil {
		t.Fatal(err)
	}
	r0 := <-rounds
	if r0.GroupRank != 0 || r1.GroupRank != 1 || r0.GroupWorldSize != 2 {
		t.Errorf("ranks %d and %d of %d; want 0 and 1 of 2", r0.GroupRank, r1.GroupRank, r0.GroupWorldSize)
	}
}

func TestNodeRankGapAfterALostNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	job := shape(t.Name(), 2, 3, 1)
	var as []*agent
	for rank := range 3 {
		a, err := newAgent(t, Config{Shape: job, NodeRank: rank, LeaseTTL: 2 * time.Second, LastCallTimeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		as = append(as, a)
	}
	rounds := nextAll(t, as, 1)
	for i, r := range rounds {
		if r.GroupRank != i {
			t.Fatalf("--node-rank=%d got group rank %d", i, r.GroupRank)
		}
	}
	w := as[0].r.Watch(ctx, rounds[0])
	as[1].cli.Close() // node 1 dies: its lease expires
	if ev := waitEvent(t, w); !strings.Contains(ev.Reason, as[1].r.ID()) {
		t.Fatalf("event %+v; want node %s lost", ev, as[1].r.ID())
	}
	again := nextAll(t, []*agent{as[0], as[2]}, 1)
	if again[0].GroupRank != 0 || again[1].GroupRank != 1 || again[1].GroupWorldSize != 2 {
		t.Errorf("after losing node 1: ranks %d, %d of %d; want 0 and 1 of 2 (the gap closed, order kept)", again[0].GroupRank, again[1].GroupRank, again[1].GroupWorldSize)
	}
}

// waitForKey waits until key exists.
func waitForKey(t *testing.T, a *agent, key string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	w := a.cli.Watch(context.Background(), key)
	for {
		resp, err := a.cli.Get(context.Background(), key)
		if err == nil && len(resp.Kvs) > 0 {
			return
		}
		select {
		case <-w:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("no %s within 30s", key)
		}
	}
}

func TestNodeRankOfALeavingNodeIsTakenOver(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	job := shape(t.Name(), 2, 2, 1)
	cfg := Config{Shape: job, NodeRank: 0, LeaseTTL: 5 * time.Second}
	old, err := newAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	oldCtx, stopOld := context.WithCancel(ctx)
	oldDone := make(chan error, 1)
	go func() {
		_, err := old.r.Next(oldCtx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
		oldDone <- err
	}()
	waitForKey(t, old, old.r.k.nodeRank(0, 0))
	// A restarted agent on the same node asks for the same rank while the
	// old one still holds it; then the old one leaves.
	var log proctest.Buffer
	logger := logrus.New()
	logger.SetOutput(&log)
	cfg.Log = logger
	restarted, err := newAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan rendezvous.Round, 1)
	go func() {
		r, err := restarted.r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	proctest.WaitFor(t, "the restarted agent to wait for rank 0", 30*time.Second, func() bool {
		return strings.Contains(log.String(), "--node-rank=0 is held by node "+old.r.ID())
	})
	stopOld()
	<-oldDone
	if err := old.r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := newAgent(t, Config{Shape: job, NodeRank: 1, LeaseTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := other.r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if r0 := <-got; r0.GroupRank != 0 || r1.GroupRank != 1 {
		t.Errorf("ranks %d and %d; want the restarted agent to take rank 0", r0.GroupRank, r1.GroupRank)
	}
}
