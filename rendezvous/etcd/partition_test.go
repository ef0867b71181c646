package etcd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/nettest"
	"github.com/gorun-dev/gorun/rendezvous"
)

// A node cut off from etcd loses its lease: the others reform without it
// and it learns that its lease ended; once the network heals it joins
// again, and the job grows back to all three.
func TestPartitionedNodeIsDroppedThenRejoins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := Config{Shape: shape(t.Name(), 2, 3, 1), LeaseTTL: 2 * time.Second, LastCallTimeout: 100 * time.Millisecond}
	as := mustAgents(t, 2, cfg)
	proxy := nettest.NewProxy(t, server.Endpoints()[0])
	cut, err := newAgentAt(t, []string{proxy.Addr()}, Config{Shape: cfg.Shape, NodeRank: -1, LeaseTTL: cfg.LeaseTTL, LastCallTimeout: cfg.LastCallTimeout})
	if err != nil {
		t.Fatal(err)
	}
	as = append(as, cut)
	rounds := nextAll(t, as, 1)
	checkRanks(t, rounds, 1)
	w0 := as[0].r.Watch(ctx, rounds[0])
	w2 := cut.r.Watch(ctx, rounds[2])

	proxy.Cut()
	if ev := waitEvent(t, w0); ev.Failure || !strings.Contains(ev.Reason, cut.r.ID()) {
		t.Fatalf("survivor's event %+v; want node %s lost", ev, cut.r.ID())
	}
	if ev := waitEvent(t, w2); !strings.Contains(ev.Reason, "lease ended") {
		t.Fatalf("cut node's event %+v; want its lease ended", ev)
	}
	smaller := nextAll(t, as[:2], 1)
	checkRanks(t, smaller, 1)

	// The cut node tries to join again; it gets through once healed, and
	// the survivors make room for it.
	s0 := as[0].r.Watch(ctx, smaller[0])
	s1 := as[1].r.Watch(ctx, smaller[1])
	back := make(chan rendezvous.Round, 1)
	go func() {
		r, err := cut.r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
		if err != nil {
			t.Error(err)
		}
		back <- r
	}()
	proxy.Heal()
	for _, w := range []<-chan rendezvous.Event{s0, s1} {
		if ev := waitEvent(t, w); !strings.Contains(ev.Reason, "waiting to join") {
			t.Errorf("event %+v; want the healed node waiting to join", ev)
		}
	}
	grown := append(nextAll(t, as[:2], 1), <-back)
	checkRanks(t, grown, 1)
	if grown[2].GroupRank != 2 {
		t.Errorf("healed node has group rank %d; want 2, after the survivors", grown[2].GroupRank)
	}
}
