package comm

import (
	"context"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// BenchmarkAllReduce64MiB2Ranks: in-process ranks over loopback TCP.
func BenchmarkAllReduce64MiB2Ranks(b *testing.B) {
	w := newWorld(b, 2, memory.ModeAvoidRecordStream, time.Minute)
	const size = 64 << 20
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
