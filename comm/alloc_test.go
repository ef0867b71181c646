package comm

import (
	"context"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// TestNoAllocationsOnTheHotPath: after warm-up, the CPU backend's
// collectives allocate nothing, whatever the size, on either transport;
// the group's bookkeeping around them (its Work, events, the reuse
// engine's record) is a fixed count per call, not per byte or chunk.
func TestNoAllocationsOnTheHotPath(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; counted without -race")
	}
	for _, transport := range []string{TransportSHM, TransportTCP} {
		t.Run(transport, func(t *testing.T) {
			t.Setenv(TransportEnv, transport)
			w := newWorld(t, 3, memory.ModeAvoidRecordStream, time.Minute)
			for _, op := range []string{"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier"} {
				if n := backendAllocs(t, w, op, 3<<20); n != 0 {
					t.Errorf("%s of 3 MiB: %v allocations per call on the backend; want none", op, n)
				}
			}
			// A few of the runtime's own (a select's waiter when a
			// collective blocks longer) may come and go.
			small, large := groupAllocs(t, w, 12<<10), groupAllocs(t, w, 12<<20)
			if large > small+4 {
				t.Errorf("a group all_reduce allocates %v times at 12 KiB and %v at 12 MiB: want no more for more bytes", small, large)
			}
		})
	}
}

// backendAllocs runs op of size bytes on every rank's backend, the other
// ranks on goroutines started once, and counts the allocations per call.
func backendAllocs(t *testing.T, w *world, op string, size int64) float64 {
	t.Helper()
	n := len(w.groups)
	// in: size bytes; out: n x in; part: in / n; same: in's size.
	in, out, part, same := make([]*memory.Tensor, n), make([]*memory.Tensor, n), make([]*memory.Tensor, n), make([]*memory.Tensor, n)
	for r := range n {
		for _, x := range []struct {
			t    **memory.Tensor
			size int64
		}{{&in[r], size}, {&out[r], size * int64(n)}, {&part[r], size / int64(n)}, {&same[r], size}} {
			var err error
			if *x.t, err = w.allocs[r].Empty(x.size, 0); err != nil {
				t.Fatal(err)
			}
			defer (*x.t).Release()
		}
	}
	call := func(r int) error {
		b := w.groups[r].backend
		dl := time.Now().Add(time.Minute)
		switch op {
		case "all_reduce":
			return b.AllReduce(in[r], Float32, Sum, dl)
		case "all_gather":
			return b.AllGather(out[r], in[r], dl)
		case "reduce_scatter":
			return b.ReduceScatter(part[r], in[r], Float32, Sum, dl)
		case "all_to_all":
			return b.AllToAll(same[r], in[r], dl)
		case "broadcast":
			return b.Broadcast(in[r], 0, dl)
		}
		return b.Barrier(dl)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := make([]chan struct{}, n)
	done := make(chan error, n)
	for r := 1; r < n; r++ {
		start[r] = make(chan struct{})
		go func() {
			for {
				select {
				case <-start[r]:
					done <- call(r)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	var failed error
	run := func() {
		for r := 1; r < n; r++ {
			start[r] <- struct{}{}
		}
		if err := call(0); err != nil && failed == nil {
			failed = err
		}
		for r := 1; r < n; r++ {
			if err := <-done; err != nil && failed == nil {
				failed = err
			}
		}
	}
	run() // warm-up: scratch space
	allocs := testing.AllocsPerRun(5, run)
	if failed != nil {
		t.Fatalf("%s: %v", op, failed)
	}
	return allocs
}

// groupAllocs counts the allocations of one synchronous all-reduce
// through the group's API on every rank.
func groupAllocs(t *testing.T, w *world, size int64) float64 {
	t.Helper()
	ctx := context.Background()
	xs := make([]*memory.Tensor, len(w.groups))
	for r := range xs {
		var err error
		if xs[r], err = w.allocs[r].Empty(size, 0); err != nil {
			t.Fatal(err)
		}
		defer xs[r].Release()
	}
	var failed error
	run := func() {
		works := make([]*Work, len(w.groups))
		for r, g := range w.groups {
			var err error
			if works[r], err = g.AllReduce(xs[r], Float32, Sum); err != nil {
				failed = err
				return
			}
		}
		for _, wk := range works {
			if err := wk.Wait(ctx); err != nil && failed == nil {
				failed = err
			}
		}
	}
	run()
	allocs := testing.AllocsPerRun(5, run)
	if failed != nil {
		t.Fatal(failed)
	}
	return allocs
}
