package comm

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/memory"
	"github.com/gorun-dev/gorun/watchdog"
)

// With a watchdog, an operation nobody waits for is recorded, seen
// complete, and its tensors handed back: the next call into the group
// releases them.
func TestWatchdogHandsOverUnwaitedWork(t *testing.T) {
	st := dialStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev := memory.NewSimDevice(1 << 30)
	defer dev.Close()
	a := memory.NewAllocator(dev, memory.AllocatorConfig{})
	eng := memory.NewEngine(a, memory.ModeAvoidRecordStream)
	rec := watchdog.NewRecorder(10)
	dog := watchdog.New(watchdog.Config{Recorder: rec, OnFailure: func(f watchdog.Failure) { t.Errorf("failure %v", f) }})
	run, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); dog.Run(run) }()
	defer func() { stop(); <-done }()
	g, err := NewGroup(ctx, st, 0, 1, "127.0.0.1", Options{Device: dev, Allocator: a, Engine: eng, Watchdog: dog, PGID: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	x, err := a.Empty(4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.AllReduce(x, Float32, Sum); err != nil {
		t.Fatal(err)
	}
	x.Release() // the shelf keeps it; nobody waits
	proctest.WaitFor(t, "the watchdog to see the all-reduce complete", 10*time.Second, func() bool { return dog.InFlight() == 0 })
	if eng.Held() != 1 {
		t.Fatalf("the engine holds %d references; want the all-reduce's tensor, handed over", eng.Held())
	}
	if err := Sync(ctx)(g.Barrier()); err != nil {
		t.Fatal(err)
	}
	if eng.Held() != 0 {
		t.Errorf("the next call left %d references", eng.Held())
	}
	// A subgroup has its own id, the same on every member (a hash of its
	// name), and its name in pg_config.
	sub, err := g.NewSubgroup(ctx, "tp", []int{0}, WithTimeout(42*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := Sync(ctx)(sub.Barrier()); err != nil {
		t.Fatal(err)
	}
	d := rec.Dump(0, 1, "test", time.Now())
	subID := pgIDOf("/tp")
	if last := d.Entries[len(d.Entries)-1]; last.PGID != subID || last.CollectiveSeqID != 0 || last.TimeoutMs != 42000 || d.PGConfig[strconv.Itoa(subID)].Name != "/tp" {
		t.Errorf("subgroup entry %+v, config %+v", last, d.PGConfig)
	}
	d.Entries = d.Entries[:2]
	if len(d.Entries) != 2 || d.Entries[0].ProfilingName != "gorun:all_reduce" || d.Entries[0].State != watchdog.StateCompleted ||
		d.Entries[0].InputSizes[0][0] != 1024 || d.Entries[0].InputDtypes[0] != "float32" || d.Entries[1].CollectiveSeqID != 1 || d.Entries[0].PGID != 3 {
		t.Errorf("entries %+v", d.Entries)
	}
}
