//go:build cgo

package nccl

import (
	"encoding/binary"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/gorun-dev/gorun/internal/testkit/cdouble"
	"github.com/gorun-dev/gorun/memory"
)

// buildDouble compiles a test-double library from testdata.

func TestMissingLibraryNamesThePlacesSearched(t *testing.T) {
	t.Setenv(LibraryEnv, "/nonexistent/libnccl.so.2")
	_, err := Open()
	if err == nil || !strings.Contains(err.Error(), LibraryEnv+"=/nonexistent/libnccl.so.2") {
		t.Fatalf("Open = %v; want an error naming %s", err, LibraryEnv)
	}
	t.Setenv(LibraryEnv, "")
	t.Setenv("LD_LIBRARY_PATH", t.TempDir())
	if _, err := Open(); err == nil {
		t.Skip("a real NCCL is installed here")
	} else {
		for _, want := range []string{LibraryEnv + " is unset", "LD_LIBRARY_PATH", "libnccl.so.2", "nvidia/nccl/lib/libnccl.so.2", "site-packages"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
	}
}

func TestMissingSymbolIsNamed(t *testing.T) {
	lib := cdouble.Build(t, "nccl_double.c", "libnccl-double.so", "-DOMIT_GROUP_END")
	_, err := OpenPath(lib)
	if err == nil || !strings.Contains(err.Error(), "symbol ncclGroupEnd missing from "+lib) {
		t.Fatalf("OpenPath = %v; want the missing symbol named", err)
	}
}

// openDoubles builds and opens the NCCL and CUDA runtime doubles.
func openDoubles(t *testing.T) (*NCCL, *CUDA) {
	n, err := OpenPath(cdouble.Build(t, "nccl_double.c", "libnccl-double.so"))
	if err != nil {
		t.Fatal(err)
	}
	cu, err := OpenCUDAPath(cdouble.Build(t, "cudart_double.c", "libcudart-double.so"))
	if err != nil {
		t.Fatal(err)
	}
	return n, cu
}

// TestCollectivesThroughTheDoubles drives the cgo and dlopen path: two
// ranks on two locked threads, buffers from the CUDA runtime double.
func TestCollectivesThroughTheDoubles(t *testing.T) {
	n, cu := openDoubles(t)
	if v, err := n.Version(); err != nil || v != 22105 {
		t.Fatalf("Version = %d, %v", v, err)
	}
	id, err := n.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	const size, count = 2, 6
	var wg sync.WaitGroup
	errs := make([]error, size)
	results := make([][]float32, size)
	for rank := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			errs[rank] = func() error {
				dev, err := NewDevice(cu, rank)
				if err != nil {
					return err
				}
				if err := cu.SetDevice(rank); err != nil {
					return err
				}
				comm, err := n.InitRank(size, rank, id)
				if err != nil {
					return err
				}
				defer comm.Destroy()
				s := dev.NewStream()
				buf, err := dev.Malloc(4 * count)
				if err != nil {
					return err
				}
				defer dev.Free(buf)
				host := make([]byte, 4*count)
				for i := range count {
					binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(float32(rank+i)))
				}
				hp := uintptr(unsafe.Pointer(&host[0]))
				if err := cu.Copy(buf, hp, len(host), 1, dev.Handle(s)); err != nil {
					return err
				}
				if err := comm.AllReduce(buf, buf, count, Float32, Sum, Stream(dev.Handle(s))); err != nil {
					return err
				}
				if err := cu.Copy(hp, buf, len(host), 2, dev.Handle(s)); err != nil {
					return err
				}
				runtime.KeepAlive(host)
				out := make([]float32, count)
				for i := range out {
					out[i] = math.Float32frombits(binary.LittleEndian.Uint32(host[4*i:]))
				}
				results[rank] = out
				gathered, err := dev.Malloc(4 * count * size)
				if err != nil {
					return err
				}
				defer dev.Free(gathered)
				if err := comm.AllGather(buf, gathered, count, Float32, Stream(dev.Handle(s))); err != nil {
					return err
				}
				if rank == 0 {
					return comm.Send(buf, count, Float32, 1, Stream(dev.Handle(s)))
				}
				return comm.Recv(buf, count, Float32, 0, Stream(dev.Handle(s)))
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range size {
		for i, got := range results[r] {
			if want := float32(0+i) + float32(1+i); got != want {
				t.Errorf("rank %d element %d = %v; want %v", r, i, got, want)
			}
		}
	}
}

// TestDeviceThroughTheDouble uses the CUDA runtime double as a
// memory.Device under the caching allocator.
func TestDeviceThroughTheDouble(t *testing.T) {
	cu, err := OpenCUDAPath(cdouble.Build(t, "cudart_double.c", "libcudart-double.so"))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := NewDevice(cu, 0)
	if err != nil {
		t.Fatal(err)
	}
	var _ memory.Device = dev
	a := memory.NewAllocator(dev, memory.AllocatorConfig{})
	x, err := a.Empty(1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := dev.NewStream()
	e := dev.NewEvent()
	dev.Record(e, s)
	dev.StreamWait(0, e)
	if !dev.Query(e) {
		t.Error("the double's events are complete at once")
	}
	x.Release()
	if st := a.Stats(); st.ReservedBytes.Current != 2<<20 || dev.TotalMemory() != 1<<32 {
		t.Errorf("reserved %d, total %d", st.ReservedBytes.Current, dev.TotalMemory())
	}
	if _, err := dev.Malloc(1 << 40); err == nil || !strings.Contains(err.Error(), "out of memory (CUDA runtime test double)") {
		t.Errorf("Malloc of 1 TiB = %v", err)
	}
	if _, err := NewDevice(cu, 99); err == nil {
		t.Error("device 99 accepted")
	}
}
