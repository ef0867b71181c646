//go:build cgo

package nccl

import (
	"context"
	"encoding/binary"
	"math"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/internal/cdouble"
	"github.com/gorun-dev/gorun/memory"
)

// TestProcessGroupOnTheDoubles: comm's API over NCCL, two ranks in one
// process, tensors from the caching allocator on the CUDA double.
func TestProcessGroupOnTheDoubles(t *testing.T) {
	n, err := OpenPath(cdouble.Build(t, "nccl_double.c", "libnccl-double.so"))
	if err != nil {
		t.Fatal(err)
	}
	cu, err := OpenCUDAPath(cdouble.Build(t, "cudart_double.c", "libcudart-double.so"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := comm.ServeStore(ln)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const size, count = 2, 8
	var wg sync.WaitGroup
	errs := make([]error, size)
	for rank := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[rank] = func() error {
				st, err := comm.DialStore(ctx, srv.Addr())
				if err != nil {
					return err
				}
				defer st.Close()
				dev, err := NewDevice(cu, rank)
				if err != nil {
					return err
				}
				a := memory.NewAllocator(dev, memory.AllocatorConfig{})
				g, err := NewGroup(ctx, st, rank, size, n, dev, comm.Options{Allocator: a, Engine: memory.NewEngine(a, memory.ModeAvoidRecordStream)})
				if err != nil {
					return err
				}
				defer g.Close()
				x, err := a.Empty(4*count, 0)
				if err != nil {
					return err
				}
				host := make([]byte, 4*count)
				for i := range count {
					binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(float32(rank*i)))
				}
				hp := uintptr(unsafe.Pointer(&host[0]))
				copyOn := func(dst, src uintptr, kind int) error {
					return dev.Do(func() error { return cu.Copy(dst, src, len(host), kind, dev.Handle(0)) })
				}
				if err := copyOn(x.Region().Ptr, hp, 1); err != nil {
					return err
				}
				w, err := g.AllReduce(x, comm.Float32, comm.Sum)
				if err != nil {
					return err
				}
				x.Release() // the engine keeps it until the wait
				if err := w.Wait(ctx); err != nil {
					return err
				}
				if err := comm.Sync(ctx)(g.Barrier()); err != nil {
					return err
				}
				y, err := a.Empty(4*count, 0)
				if err != nil {
					return err
				}
				defer y.Release()
				if err := copyOn(y.Region().Ptr, hp, 1); err != nil {
					return err
				}
				if err := comm.Sync(ctx)(g.AllReduce(y, comm.Float32, comm.Max)); err != nil {
					return err
				}
				if err := copyOn(hp, y.Region().Ptr, 2); err != nil {
					return err
				}
				runtime.KeepAlive(host)
				for i := range count {
					if got := math.Float32frombits(binary.LittleEndian.Uint32(host[4*i:])); got != float32(i) {
						t.Errorf("rank %d element %d = %v; want %v", rank, i, got, float32(i))
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}
