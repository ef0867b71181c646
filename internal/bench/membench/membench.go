// Package membench replays training-step memory patterns on the simulated
// device, through the caching allocator and the reuse engine, and reports
// peak memory, events and the violations the happens-before checker found
// (gorun bench memory).
package membench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// Workloads lists the workloads, each modelled on what real jobs do.
var Workloads = []string{"ddp", "fsdp", "ddp-late-wait", "fragmentation"}

// Config is one run.
type Config struct {
	Workload           string
	Mode               memory.Mode
	ExpandableSegments bool
}

// Result is one run's report, as --format json prints it.
type Result struct {
	Workload           string `json:"workload"`
	Mode               string `json:"mode"`
	ExpandableSegments bool   `json:"expandable_segments"`
	PeakReservedBytes  int64  `json:"peak_reserved_bytes"`
	PeakAllocatedBytes int64  `json:"peak_allocated_bytes"`
	// PeakActiveBytes includes freed blocks still held for another
	// stream's events.
	PeakActiveBytes int64 `json:"peak_active_bytes"`
	// EventsCreated and EventsQueried are the allocator's cross-stream
	// events.
	EventsCreated int64   `json:"events_created"`
	EventsQueried int64   `json:"events_queried"`
	Violations    int     `json:"violations"`
	OOM           bool    `json:"oom"`
	OOMError      string  `json:"oom_error,omitempty"`
	Seconds       float64 `json:"seconds"`
}

// Simulated costs: the communication stream is slower than compute, so
// buckets queue on it as they do on a real network.
const (
	computeTime = 200 * time.Microsecond
	copyTime    = 50 * time.Microsecond
	commTime    = 600 * time.Microsecond
)

// Run replays one workload.
func Run(ctx context.Context, cfg Config) (Result, error) {
	play, ok := map[string]func(*run) error{"ddp": ddp, "fsdp": fsdp, "ddp-late-wait": ddpLateWait, "fragmentation": fragmentation}[cfg.Workload]
	if !ok {
		return Result{}, fmt.Errorf("--workload=%q: want one of %v", cfg.Workload, Workloads)
	}
	capacity := int64(1 << 30)
	if cfg.Workload == "fragmentation" {
		capacity = 100 << 20
	}
	d := memory.NewSimDevice(capacity)
	defer d.Close()
	a := memory.NewAllocator(d, memory.AllocatorConfig{ExpandableSegments: cfg.ExpandableSegments})
	r := &run{ctx: ctx, d: d, a: a, e: memory.NewEngine(a, cfg.Mode), comm: d.NewStream()}
	wctx, stop := context.WithCancel(ctx)
	r.watchdog(wctx)
	start := time.Now()
	err := play(r)
	elapsed := time.Since(start)
	stop()
	r.wg.Wait()
	res := Result{Workload: cfg.Workload, Mode: cfg.Mode.String(), ExpandableSegments: cfg.ExpandableSegments, Seconds: elapsed.Seconds()}
	var oom *memory.OOMError
	switch {
	case errors.As(err, &oom):
		res.OOM, res.OOMError = true, err.Error()
	case err != nil:
		return res, err
	}
	if err := d.SynchronizeDevice(ctx); err != nil {
		return res, err
	}
	r.e.Drain()
	st := a.Stats()
	res.PeakReservedBytes, res.PeakAllocatedBytes, res.PeakActiveBytes = st.ReservedBytes.Peak, st.AllocatedBytes.Peak, st.ActiveBytes.Peak
	res.EventsCreated, res.EventsQueried = st.EventsCreated, st.EventsQueried
	res.Violations, _ = d.Violations()
	return res, nil
}

// run is one workload's device, allocator, engine and process group.
type run struct {
	ctx  context.Context
	d    *memory.SimDevice
	a    *memory.Allocator
	e    *memory.Engine
	comm memory.Stream

	mu    sync.Mutex
	works []*memory.Work // launched, not yet seen complete by the watchdog
	wg    sync.WaitGroup
	ops   int
}

// watchdog polls the launched Works every millisecond and reports the
// completed ones to the engine, as ProcessGroupNCCL's watchdog does.
func (r *run) watchdog(ctx context.Context) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			r.mu.Lock()
			kept := r.works[:0]
			for _, w := range r.works {
				if r.d.Query(w.End) {
					r.e.Completed(w)
				} else {
					kept = append(kept, w)
				}
			}
			r.works = kept
			r.mu.Unlock()
		}
	}()
}

// empty allocates on the compute stream.
func (r *run) empty(size int64) (*memory.Tensor, error) { return r.a.Empty(size, 0) }

// compute enqueues a kernel on the compute stream that reads and writes.
func (r *run) compute(name string, reads, writes []*memory.Tensor, d time.Duration) {
	r.ops++
	r.d.Launch(0, memory.Op{Name: fmt.Sprintf("%s #%d", name, r.ops), Reads: regions(reads), Writes: regions(writes), Duration: d})
}

// collective is a process-group call: drain the hand-off list, order the
// communication stream after the compute stream, enqueue the operation,
// record its end and hand its tensors to the engine.
func (r *run) collective(name string, tensors ...*memory.Tensor) *memory.Work {
	r.e.Drain()
	ready := r.d.NewEvent()
	r.d.Record(ready, 0)
	r.d.StreamWait(r.comm, ready)
	r.ops++
	r.d.Launch(r.comm, memory.Op{Name: fmt.Sprintf("%s #%d", name, r.ops), Reads: regions(tensors), Writes: regions(tensors), Duration: commTime})
	w := &memory.Work{Stream: r.comm, End: r.d.NewEvent()}
	r.d.Record(w.End, r.comm)
	r.e.Launch(w, tensors...)
	r.mu.Lock()
	r.works = append(r.works, w)
	r.mu.Unlock()
	return w
}

// wait is work.wait() on the compute stream.
func (r *run) wait(w *memory.Work) { r.e.Wait(w, 0) }

func regions(ts []*memory.Tensor) []memory.Region {
	out := make([]memory.Region, len(ts))
	for i, t := range ts {
		out[i] = t.Region()
	}
	return out
}

func release(ts ...*memory.Tensor) {
	for _, t := range ts {
		t.Release()
	}
}
