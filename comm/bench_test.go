package comm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/memory"
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
