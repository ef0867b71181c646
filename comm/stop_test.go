package comm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/memory"
)

// TestStopIsNotADesync: rank 1 queues all-reduces larger than a ring and
// closes its group while they are in flight, as a worker stopped by its
// agent does. Its own operations fail with ErrStopped; rank 0's fail
// naming rank 1's close; nobody reports a desync (before, the queued
// operations ran on after the first failure and wrote the start of new
// messages into the link that one had left mid-message).
func TestStopIsNotADesync(t *testing.T) {
	for _, transport := range []string{TransportSHM, TransportTCP} {
		t.Run(transport, func(t *testing.T) {
			t.Setenv(TransportEnv, transport)
			for round := range 3 {
				w := newWorld(t, 2, memory.ModeAvoidRecordStream, 20*time.Second)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				works := make([][]*Work, 2)
				for r := range 2 {
					for range 4 {
						x, err := w.allocs[r].Empty(12<<20, 0)
						if err != nil {
							t.Fatal(err)
						}
						wk, err := w.groups[r].AllReduce(x, Float32, Sum)
						if err != nil {
							t.Fatal(err)
						}
						x.Release()
						works[r] = append(works[r], wk)
					}
				}
				// Rank 1 is stopped while its all-reduces run or wait.
				proctest.WaitFor(t, "rank 1's first all-reduce to start", 10*time.Second, works[1][0].Started)
				if err := w.groups[1].Close(); err != nil {
					t.Fatal(err)
				}
				var peerClosed bool
				for r := range 2 {
					for i, wk := range works[r] {
						err := wk.Wait(ctx)
						if err == nil {
							continue
						}
						if strings.Contains(err.Error(), "desync") {
							t.Fatalf("round %d rank %d all-reduce %d: %v", round, r, i, err)
						}
						if r == 1 && !errors.Is(err, ErrStopped) {
							t.Errorf("round %d rank 1 all-reduce %d: %v; want ErrStopped", round, i, err)
						}
						if r == 0 && strings.Contains(err.Error(), "closed its connection (it was stopped, or it exited)") {
							peerClosed = true
						}
					}
				}
				if !peerClosed {
					t.Errorf("round %d: rank 0's errors do not say that rank 1 closed its connection", round)
				}
				cancel()
			}
		})
	}
}
