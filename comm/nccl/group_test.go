//go:build cgo

package nccl

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/internal/testkit/commtest"
	"github.com/gorun-dev/gorun/memory"
	"github.com/gorun-dev/gorun/watchdog"
)

// TestProcessGroupOnTheDoubles: every collective of comm's API over
// NCCL, ranks as goroutines of one process, tensors from the caching
// allocator on the CUDA double.
func TestProcessGroupOnTheDoubles(t *testing.T) {
	n, cu := openDoubles(t)
	v := commtest.Vendor{Runtime: cu, Copier: cu, NewGroup: func(ctx context.Context, st comm.Store, rank, size int, dev *memory.RuntimeDevice, opt comm.Options) (*comm.Group, error) {
		return NewGroup(ctx, st, rank, size, n, dev, opt)
	}}
	for _, size := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { commtest.RunAllOps(t, v, size) })
	}
}

// The watchdog asks the communicator for asynchronous errors
// (ncclCommGetAsyncError) and reports the first.
func TestWatchdogSeesAsyncErrors(t *testing.T) {
	n, cu := openDoubles(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, secret := commtest.Store(t)
	st, err := comm.DialStore(ctx, addr, secret)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	dev, err := NewDevice(cu, 0)
	if err != nil {
		t.Fatal(err)
	}
	failures := make(chan watchdog.Failure, 1)
	dog := watchdog.New(watchdog.Config{Rank: 0, OnFailure: func(f watchdog.Failure) { failures <- f }})
	a := memory.NewAllocator(dev, memory.AllocatorConfig{})
	g, err := NewGroup(ctx, st, 0, 1, n, dev, comm.Options{Allocator: a, Engine: memory.NewEngine(a, memory.ModeAvoidRecordStream), Watchdog: dog})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	t.Setenv("NCCL_DOUBLE_ASYNC_ERROR", "6")
	run, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); dog.Run(run) }()
	defer func() { stop(); <-done }()
	select {
	case f := <-failures:
		if f.Kind != watchdog.KindError || !strings.Contains(f.Err, "(6)") {
			t.Errorf("failure %+v", f)
		}
	case <-ctx.Done():
		t.Fatal("the watchdog did not report the asynchronous error")
	}
}
