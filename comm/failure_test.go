package comm

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// TestReuseModesNoViolations: while collectives run in every mode, with
// tensors released before their wait, the checker finds nothing.
func TestReuseModesNoViolations(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []memory.Mode{memory.ModeRecordStream, memory.ModeEraseRecordStream, memory.ModeAvoidRecordStream, memory.ModeEraseWithBlock} {
		w := newWorld(t, 3, mode, 30*time.Second)
		w.each(t, func(r int, g *Group) error {
			var works []*Work
			for i := range 20 {
				x, err := w.allocs[r].Empty(int64(1024*(1+i%4)), 0)
				if err != nil {
					return err
				}
				w.devs[r].Launch(0, memory.Op{Name: "fill", Writes: []memory.Region{x.Region()}})
				wk, err := g.AllReduce(x, Float32, Sum)
				if err != nil {
					return err
				}
				x.Release() // before the wait: the mode must protect it
				works = append(works, wk)
			}
			for _, wk := range works {
				if err := wk.Wait(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		for r, d := range w.devs {
			if n, _ := d.Violations(); n != 0 {
				t.Errorf("mode %s rank %d: %s", mode, r, d.ViolationSummary())
			}
		}
	}
}

// A rank that dies mid-collective gives the others an error, not a hang.
func TestDeadPeerGivesErrors(t *testing.T) {
	w := newWorld(t, 3, memory.ModeAvoidRecordStream, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	start := time.Now()
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x, err := w.allocs[r].Empty(4<<20, 0)
			if err != nil {
				errs[r] = err
				return
			}
			defer x.Release()
			errs[r] = Sync(ctx)(w.groups[r].AllReduce(x, Float32, Sum))
		}()
	}
	w.groups[2].Close() // rank 2 dies without joining
	wg.Wait()
	for r := range 2 {
		if errs[r] == nil {
			t.Errorf("rank %d: no error after rank 2 died", r)
		}
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("errors came after %v; a dead peer should be seen at once", d)
	}
	// The group is broken: later calls fail at once.
	x, _ := w.allocs[0].Empty(1024, 0)
	defer x.Release()
	if _, err := w.groups[0].AllReduce(x, Float32, Sum); err == nil || !strings.Contains(err.Error(), "failed earlier") {
		t.Errorf("after the failure: %v", err)
	}
}

// A rank that stays alive but never joins gives the others a timeout.
func TestSilentPeerTimesOut(t *testing.T) {
	w := newWorld(t, 2, memory.ModeAvoidRecordStream, 300*time.Millisecond)
	x, err := w.allocs[0].Empty(1024, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	err = Sync(context.Background())(w.groups[0].AllReduce(x, Float32, Sum))
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("err = %v; want a timeout naming the peer", err)
	}
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) {
		t.Logf("error chain: %v", err)
	}
}
