package comm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/memory"
	"github.com/gorun-dev/gorun/watchdog"
)

// BenchmarkAllReduce64MiB2Ranks: in-process ranks (shared memory).
func BenchmarkAllReduce64MiB2Ranks(b *testing.B) { benchAllReduce(b, 64<<20) }

// BenchmarkAllReduceSmall2Ranks: the latency of small all-reduces.
func BenchmarkAllReduceSmall2Ranks(b *testing.B) {
	for _, size := range []int64{4 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) { benchAllReduce(b, size) })
	}
}

func benchAllReduce(b *testing.B, size int64) {
	w := newWorld(b, 2, memory.ModeAvoidRecordStream, time.Minute)
	xs := make([]*memory.Tensor, 2)
	for r := range 2 {
		xs[r], _ = w.allocs[r].Empty(size, 0)
	}
	ctx := context.Background()
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		done := make(chan error, 2)
		for r := range 2 {
			go func() { done <- Sync(ctx)(w.groups[r].AllReduce(xs[r], Float32, Sum)) }()
		}
		for range 2 {
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	for r := range 2 {
		xs[r].Release()
	}
}

// BenchmarkWatchdogOverhead: one rank's synchronous 4 KiB all-reduce
// (nothing on the wire: the group's own cost) without a watchdog, the
// anchor, and with one (flight recorder of 2000 entries).
func BenchmarkWatchdogOverhead(b *testing.B) {
	for _, watched := range []bool{false, true} {
		b.Run(map[bool]string{false: "anchor-no-watchdog", true: "watchdog"}[watched], func(b *testing.B) {
			st := dialStore(b)
			ctx := context.Background()
			dev := memory.NewSimDevice(1 << 30)
			defer dev.Close()
			a := memory.NewAllocator(dev, memory.AllocatorConfig{})
			opt := Options{Device: dev, Allocator: a, Engine: memory.NewEngine(a, memory.ModeAvoidRecordStream)}
			if watched {
				dog := watchdog.New(watchdog.Config{Recorder: watchdog.NewRecorder(watchdog.DefaultBufferSize)})
				run, stop := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { defer close(done); dog.Run(run) }()
				defer func() { stop(); <-done }()
				opt.Watchdog = dog
			}
			g, err := NewGroup(ctx, st, 0, 1, "127.0.0.1", opt)
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			x, err := a.Empty(4096, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer x.Release()
			for b.Loop() {
				if err := Sync(ctx)(g.AllReduce(x, Float32, Sum)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
