package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// pending is a launched operation with the gate that holds it.
type pending struct {
	w    *Work
	gate chan struct{}
}

// randomRun plays a random program of allocations, releases, uses,
// collectives, waits, watchdog completions and drains, and returns the
// violations the checker found.
func randomRun(t *testing.T, mode Mode, seed uint64, steps int) int {
	r := rand.New(rand.NewPCG(seed, 7))
	d := NewSimDevice(1 << 30)
	defer d.Close()
	a := NewAllocator(d, AllocatorConfig{ExpandableSegments: seed%3 == 0})
	e := NewEngine(a, mode)
	comms := []Stream{d.NewStream(), d.NewStream(), d.NewStream()}
	sizes := []int64{512, 4 * kib, 300 * kib, mib, 3 * mib, 12 * mib}
	var live []*Tensor
	var inflight []pending
	byStream := map[Stream][]pending{}
	op := 0
	open := func(p pending) {
		// A stream runs in order: everything launched before p on its
		// stream is let through too.
		q := byStream[p.w.Stream]
		for len(q) > 0 {
			head := q[0]
			q = q[1:]
			select {
			case <-head.gate:
			default:
				close(head.gate)
			}
			if head.w == p.w {
				break
			}
		}
		byStream[p.w.Stream] = q
	}
	remove := func(i int) pending {
		p := inflight[i]
		inflight = append(inflight[:i], inflight[i+1:]...)
		return p
	}
	for range steps {
		op++
		switch k := r.IntN(10); {
		case k < 3 || len(live) == 0:
			x, err := a.Empty(sizes[r.IntN(len(sizes))], 0)
			if err != nil {
				t.Fatal(err)
			}
			d.Launch(0, Op{Name: fmt.Sprintf("write #%d", op), Writes: []Region{x.Region()}})
			live = append(live, x)
		case k == 3:
			i := r.IntN(len(live))
			live[i].Release()
			live = append(live[:i], live[i+1:]...)
		case k == 4:
			x := live[r.IntN(len(live))]
			d.Launch(0, Op{Name: fmt.Sprintf("kernel #%d", op), Reads: []Region{x.Region()}, Writes: []Region{x.Region()}})
		case k < 7:
			e.Drain()
			n := 1 + r.IntN(min(3, len(live)))
			var ts []*Tensor
			var regions []Region
			for range n {
				x := live[r.IntN(len(live))]
				ts = append(ts, x)
				regions = append(regions, x.Region())
			}
			c := comms[r.IntN(len(comms))]
			ready := d.NewEvent()
			d.Record(ready, 0)
			d.StreamWait(c, ready)
			gate := make(chan struct{})
			d.Launch(c, Op{Name: fmt.Sprintf("collective #%d", op), Reads: regions, Writes: regions, Gate: gate})
			w := &Work{Stream: c, End: d.NewEvent(), P2P: r.IntN(4) == 0}
			d.Record(w.End, c)
			e.Launch(w, ts...)
			p := pending{w, gate}
			inflight = append(inflight, p)
			byStream[c] = append(byStream[c], p)
		case k == 7 && len(inflight) > 0:
			// The collective finishes some time; waiting only orders the
			// compute stream after it (a gate left shut would hold the
			// compute stream forever).
			p := remove(r.IntN(len(inflight)))
			open(p)
			e.Wait(p.w, 0)
		case k == 8 && len(inflight) > 0:
			p := remove(r.IntN(len(inflight)))
			open(p)
			if err := d.Synchronize(context.Background(), p.w.End); err != nil {
				t.Fatal(err)
			}
			e.Completed(p.w)
		default:
			e.Drain()
		}
	}
	for _, q := range byStream {
		for _, p := range q {
			select {
			case <-p.gate:
			default:
				close(p.gate)
			}
		}
	}
	for _, p := range inflight {
		e.Wait(p.w, 0)
	}
	for _, x := range live {
		x.Release()
	}
	e.Drain()
	if err := d.SynchronizeDevice(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, _ := d.Violations()
	if n > 0 && mode != ModeNone {
		t.Logf("seed %d: %s", seed, d.ViolationSummary())
	}
	return n
}

// TestRandomProgramsNeverViolate: random interleavings never give a
// violation in modes 0-3, and do without protection.
func TestRandomProgramsNeverViolate(t *testing.T) {
	seeds := 25
	if testing.Short() {
		seeds = 8
	}
	for _, mode := range []Mode{ModeRecordStream, ModeEraseRecordStream, ModeAvoidRecordStream, ModeEraseWithBlock} {
		for seed := range uint64(seeds) {
			if n := randomRun(t, mode, seed, 300); n != 0 {
				t.Fatalf("mode %s, seed %d: %d violations", mode, seed, n)
			}
		}
	}
	unprotected := 0
	for seed := range uint64(seeds) {
		if randomRun(t, ModeNone, seed, 300) > 0 {
			unprotected++
		}
	}
	if unprotected < seeds/2 {
		t.Errorf("without protection only %d of %d random programs showed a violation", unprotected, seeds)
	}
}
