package etcd

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/timing"

	"github.com/gorun-dev/gorun/rendezvous"
)

// TestShapeUsable: a round of n joined nodes runs with the largest
// allowed size not above n.
func TestShapeUsable(t *testing.T) {
	for _, tt := range []struct {
		name              string
		shape             Shape
		want              []int // usable(0), usable(1), ...
		largest, smallest int
	}{
		{"no sizes", Shape{MinNodes: 2, MaxNodes: 4}, []int{0, 0, 2, 3, 4, 4}, 4, 2},
		{"plan sizes", Shape{MinNodes: 1, MaxNodes: 4, Sizes: []int{2, 4}}, []int{0, 0, 2, 2, 4, 4}, 4, 2},
		{"largest below max", Shape{MinNodes: 1, MaxNodes: 3, Sizes: []int{2}}, []int{0, 0, 2, 2, 2}, 2, 2},
		{"sizes outside the range ignored", Shape{MinNodes: 2, MaxNodes: 3, Sizes: []int{1, 3, 5}}, []int{0, 0, 0, 3, 3, 3}, 3, 3},
		{"none valid", Shape{MinNodes: 1, MaxNodes: 3, Sizes: []int{}}, []int{0, 0, 0, 0}, 0, 0},
	} {
		for n, want := range tt.want {
			if got := tt.shape.usable(n); got != want {
				t.Errorf("%s: usable(%d) = %d, want %d", tt.name, n, got, want)
			}
		}
		if l, s := tt.shape.largest(), tt.shape.smallest(); l != tt.largest || s != tt.smallest {
			t.Errorf("%s: largest %d smallest %d, want %d %d", tt.name, l, s, tt.largest, tt.smallest)
		}
	}
	if _, err := New(context.Background(), nil, Config{Shape: Shape{RunID: "x", MinNodes: 1, MaxNodes: 3, Sizes: []int{4}}}); err == nil || !strings.Contains(err.Error(), "no node count") {
		t.Errorf("a shape with no valid size: %v", err)
	}
}

// nextAsync runs Next on a in the background.
func nextAsync(a *agent, nproc int) <-chan rendezvous.Round {
	ch := make(chan rendezvous.Round, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := a.r.Next(ctx, rendezvous.Node{LocalWorldSize: nproc, Role: "default"})
		if err != nil {
			r.Number = -1
		}
		ch <- r
	}()
	return ch
}

// TestSpareReplacesALostNode: with a layout valid at 2 nodes only, a
// third node waits as a spare (no round end for it), and takes the place
// of a lost member: the next round has 2 nodes again, without waiting
// for the last call.
func TestSpareReplacesALostNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sh := shape(t.Name(), 1, 3, 2)
	sh.Sizes = []int{2}
	// A last call this long would show: the spare closes the round at once.
	cfg := Config{Shape: sh, LeaseTTL: 2 * time.Second, LastCallTimeout: time.Minute}
	as := mustAgents(t, 3, cfg)
	chans := []<-chan rendezvous.Round{nextAsync(as[0], 2), nextAsync(as[1], 2)}
	first := []rendezvous.Round{<-chans[0], <-chans[1]}
	checkRanks(t, first, 2)
	spare := nextAsync(as[2], 2)
	w0 := as[0].r.Watch(ctx, first[0])
	// The spare must not end the round; the lost member does.
	waitForKey(t, as[0], as[0].r.k.join(first[0].Number+1, as[2].r.ID()))
	as[1].cli.Close()
	ev := waitEvent(t, w0)
	if ev.Failure || !strings.Contains(ev.Reason, as[1].r.ID()) || strings.Contains(ev.Reason, "waiting to join") {
		t.Fatalf("event %+v; want the loss of %s", ev, as[1].r.ID())
	}
	start := time.Now()
	again := []rendezvous.Round{<-nextAsync(as[0], 2), <-spare}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the spare's round took %v: it waited for the last call", took)
	}
	checkRanks(t, again, 2)
	if again[0].GroupRank != 0 || again[1].GroupRank != 1 || again[0].Number != first[0].Number+1 {
		t.Errorf("survivor rank %d, spare rank %d in round %d; want 0, 1 in round %d", again[0].GroupRank, again[1].GroupRank, again[0].Number, first[0].Number+1)
	}
	if again[1].SpareSince.IsZero() || !again[0].SpareSince.IsZero() {
		t.Errorf("spare since %v, survivor %v: want only the spare's set", again[1].SpareSince, again[0].SpareSince)
	}
}

// TestRoundGrowsOnlyToAValidSize: with sizes 2 and 4, a third node waits
// (3 nodes run as 2), a fourth ends the round so that 4 run.
func TestRoundGrowsOnlyToAValidSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sh := shape(t.Name(), 1, 4, 1)
	sh.Sizes = []int{2, 4}
	// A last call of 1 s, not 0.1 s: under the busy suite the third and
	// fourth nodes missed the re-formed round and waited as its spares.
	cfg := Config{Shape: sh, LastCallTimeout: timing.Stretch(t, time.Second)}
	as := mustAgents(t, 4, cfg)
	rounds := nextAll(t, as[:2], 1)
	w0 := as[0].r.Watch(ctx, rounds[0])
	third := nextAsync(as[2], 1)
	waitForKey(t, as[0], as[0].r.k.join(rounds[0].Number+1, as[2].r.ID()))
	fourth := nextAsync(as[3], 1)
	ev := waitEvent(t, w0)
	if ev.Failure || !strings.Contains(ev.Reason, "4 nodes can run as 4") {
		t.Fatalf("event %+v; want a scale-up to 4 (not to 3)", ev)
	}
	all := append(nextAll(t, as[:2], 1), <-third, <-fourth)
	checkRanks(t, all, 1)
}

// TestRoundAfterALossWaitsNotForTheLastCall: the survivors of a lost
// node (its client gone, its lease left to end) whose workers failed at
// once join the next round before the lost node's lease ends; the round
// closes as soon as that lease ends and every member still alive is back,
// not after the last call (it used to wait the whole last call, 30 s by
// default, for a node that is dead).
func TestRoundAfterALossWaitsNotForTheLastCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A last call this long would show.
	cfg := Config{Shape: shape(t.Name(), 2, 3, 1), LeaseTTL: 2 * time.Second, LastCallTimeout: 10 * time.Minute}
	as := mustAgents(t, 3, cfg)
	first := nextAll(t, as, 1)
	as[2].cli.Close() // lost: no leave, its lease ends in LeaseTTL
	// The survivors' workers fail at once (gloo sees the closed
	// connections): a failure ends the round before the lease does.
	if _, err := as[0].r.Fail(ctx, first[0], "worker 0 failed: connection reset", 1, true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	again := nextAll(t, as[:2], 1)
	if took := time.Since(start); took > 5*time.Minute {
		t.Errorf("the survivors' round took %v: it waited for the last call", took)
	}
	checkRanks(t, again, 1)
	if again[0].GroupWorldSize != 2 {
		t.Errorf("round of %d nodes; want the 2 survivors", again[0].GroupWorldSize)
	}
}

// TestFlightRecordersWaitNotForALostNode: after a failed round, the
// survivors share their flight-recorder reports; a node that is lost (its
// lease ended) never reports and is not waited for. Every survivor used to
// wait the whole wait (10 s in gorun) for it after a node loss.
func TestFlightRecordersWaitNotForALostNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := Config{Shape: shape(t.Name(), 2, 3, 1), LeaseTTL: 2 * time.Second, LastCallTimeout: 10 * time.Minute}
	as := mustAgents(t, 3, cfg)
	rounds := nextAll(t, as, 1)
	as[2].cli.Close() // lost: it will never report
	const wait = 10 * time.Minute
	type shared struct {
		reports [][]byte
		err     error
	}
	done := make(chan shared, 2)
	start := time.Now()
	for i := range 2 {
		go func() {
			reports, err := as[i].r.ShareFlightRecorders(ctx, rounds[i], []byte(`{"node":`+strconv.Itoa(i)+`}`), wait)
			done <- shared{reports, err}
		}()
	}
	for range 2 {
		s := <-done
		if s.err != nil {
			t.Fatal(s.err)
		}
		if len(s.reports) != 2 {
			t.Errorf("%d reports; want the 2 survivors'", len(s.reports))
		}
	}
	if took := time.Since(start); took > wait/2 {
		t.Errorf("sharing the reports took %v: it waited for the lost node", took)
	}
}
