package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
)

// waitStop waits for a stop request on ch.
func waitStop(t *testing.T, ch <-chan rendezvous.StopRequest) rendezvous.StopRequest {
	t.Helper()
	select {
	case req, ok := <-ch:
		if !ok {
			t.Fatal("the stop watch closed without a request")
		}
		return req
	case <-time.After(20 * time.Second):
		t.Fatal("no stop request within 20s")
	}
	return rendezvous.StopRequest{}
}

// TestStopRequestReachesEveryNode: one node's request reaches every
// node's watch, also one that starts watching after it; the first
// request stands; a member's success then makes the job preempted, for
// Succeed and for a late Next alike.
func TestStopRequestReachesEveryNode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	as := mustAgents(t, 2, Config{Shape: shape(t.Name(), 1, 2, 1)})
	rounds := nextAll(t, as, 1)
	early := as[0].r.WatchStop(ctx)
	if err := as[1].r.RequestStop(ctx, rendezvous.StopRequest{Reason: "SIGTERM on node 1", Grace: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := as[0].r.RequestStop(ctx, rendezvous.StopRequest{Reason: "a later one"}); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan rendezvous.StopRequest{early, as[1].r.WatchStop(ctx)} {
		if req := waitStop(t, ch); req.Reason != "SIGTERM on node 1" || req.Grace != 30*time.Second {
			t.Errorf("request %+v; want the first", req)
		}
	}
	errs := make(chan error, 2)
	for i := range as {
		go func() { errs <- as[i].r.Succeed(ctx, rounds[i]) }()
	}
	for range as {
		if err := <-errs; !errors.Is(err, rendezvous.ErrPreempted) || !strings.Contains(err.Error(), "SIGTERM on node 1") {
			t.Errorf("Succeed: %v; want ErrPreempted with the reason", err)
		}
	}
	late, err := newAgent(t, Config{Shape: as[0].r.cfg.Shape, NodeRank: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := late.r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"}); !errors.Is(err, rendezvous.ErrPreempted) {
		t.Errorf("a late node's Next: %v; want ErrPreempted", err)
	}
}

// TestStrangersStopRequestRefused: a value at the stop key that the job
// did not seal asks nothing, and does not block the job's own request;
// gorun stop's RequestStop needs the job's token and an existing job.
func TestStrangersStopRequestRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tok, err := rendezvous.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	as := mustAgents(t, 1, Config{Shape: shape(t.Name(), 1, 1, 1), Token: tok})
	nextAll(t, as, 1)
	a := as[0]
	if _, err := a.cli.Put(ctx, a.r.k.stop(), `{"reason":"a stranger"}`); err != nil {
		t.Fatal(err)
	}
	w := a.r.WatchStop(ctx)
	other, _ := rendezvous.NewToken()
	for _, tt := range []struct {
		name  string
		run   string
		token Token
		want  string
	}{
		{"wrong token", a.r.cfg.Shape.RunID, other, "not sealed with this token"},
		{"no such job", "nosuchjob", tok, "no job"},
	} {
		if err := RequestStop(ctx, a.cli, "", tt.run, tt.token, rendezvous.StopRequest{Reason: tt.name}, testLog(t)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want %q", tt.name, err, tt.want)
		}
	}
	select {
	case req := <-w:
		t.Fatalf("a refused request was delivered: %+v", req)
	default:
	}
	if err := RequestStop(ctx, a.cli, "", a.r.cfg.Shape.RunID, tok, rendezvous.StopRequest{Reason: "gorun stop"}, testLog(t)); err != nil {
		t.Fatal(err)
	}
	if req := waitStop(t, w); req.Reason != "gorun stop" {
		t.Errorf("request %+v; want the job's own", req)
	}
}
