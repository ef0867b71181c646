//go:build cgo

package hccl

import (
	"encoding/binary"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/gorun-dev/gorun/internal/testkit/cdouble"
	"github.com/gorun-dev/gorun/memory"
)

func TestMissingLibraryAndSymbol(t *testing.T) {
	t.Setenv(LibraryEnv, "/nonexistent/libhccl.so")
	if _, err := Open(); err == nil || !strings.Contains(err.Error(), LibraryEnv+"=/nonexistent/libhccl.so") {
		t.Errorf("Open = %v; want an error naming %s", err, LibraryEnv)
	}
	t.Setenv(LibraryEnv, "")
	if _, err := Open(); err == nil {
		t.Log("a real HCCL is installed here")
	} else if !strings.Contains(err.Error(), "/usr/local/Ascend/ascend-toolkit/latest/lib64/libhccl.so") || !strings.Contains(err.Error(), "LD_LIBRARY_PATH") {
		t.Errorf("error %q does not name the places searched", err)
	}
	lib := cdouble.Build(t, "hccl_double.c", "libhccl-double.so", "-DOMIT_BARRIER")
	if _, err := OpenPath(lib); err == nil || !strings.Contains(err.Error(), "symbol HcclBarrier missing from "+lib) {
		t.Errorf("OpenPath = %v; want the missing symbol named", err)
	}
}

// openDoubles builds and opens the HCCL and ACL runtime doubles.
func openDoubles(t *testing.T) (*HCCL, *ACL) {
	h, err := OpenPath(cdouble.Build(t, "hccl_double.c", "libhccl-double.so"))
	if err != nil {
		t.Fatal(err)
	}
	acl, err := OpenACLPath(cdouble.Build(t, "acl_double.c", "libascendcl-double.so"))
	if err != nil {
		t.Fatal(err)
	}
	return h, acl
}

// TestCollectivesThroughTheDoubles drives the cgo and dlopen path with
// two ranks on two locked threads and NPU memory from the ACL double.
func TestCollectivesThroughTheDoubles(t *testing.T) {
	h, acl := openDoubles(t)
	info, err := h.NewRootInfo()
	if err != nil {
		t.Fatal(err)
	}
	const size, count = 2, 5
	var wg sync.WaitGroup
	errs := make([]error, size)
	got := make([][]int32, size)
	for rank := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			errs[rank] = func() error {
				dev, err := NewDevice(acl, rank)
				if err != nil {
					return err
				}
				comm, err := h.InitRank(size, rank, info)
				if err != nil {
					return err
				}
				defer comm.Destroy()
				buf, err := dev.Malloc(4 * count)
				if err != nil {
					return err
				}
				defer dev.Free(buf)
				host := make([]byte, 4*count)
				for i := range count {
					binary.LittleEndian.PutUint32(host[4*i:], uint32(10*rank+i))
				}
				hp := uintptr(unsafe.Pointer(&host[0]))
				if err := acl.Copy(buf, hp, len(host), 1, dev.Handle(0)); err != nil {
					return err
				}
				if err := comm.AllReduce(buf, buf, count, Int32, Max, Stream(dev.Handle(0))); err != nil {
					return err
				}
				if err := comm.Barrier(Stream(dev.Handle(0))); err != nil {
					return err
				}
				if err := comm.Broadcast(buf, count, Int32, 0, Stream(dev.Handle(0))); err != nil {
					return err
				}
				if err := acl.Copy(hp, buf, len(host), 2, dev.Handle(0)); err != nil {
					return err
				}
				runtime.KeepAlive(host)
				for i := range count {
					got[rank] = append(got[rank], int32(binary.LittleEndian.Uint32(host[4*i:])))
				}
				return comm.AsyncError()
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
		for i, v := range got[r] {
			if want := int32(10 + i); v != want {
				t.Errorf("rank %d element %d = %d; want %d", r, i, v, want)
			}
		}
	}
}

// The ACL double under the shared RuntimeDevice: ACL's event status is
// 1 for complete (the newer call's numbering), and a bad device is
// refused.
func TestACLDeviceThroughTheDouble(t *testing.T) {
	acl, err := OpenACLPath(cdouble.Build(t, "acl_double.c", "libascendcl-double.so"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewDevice(acl, 99); err == nil {
		t.Fatal("NPU 99 accepted")
	}
	dev, err := NewDevice(acl, 1)
	if err != nil {
		t.Fatal(err)
	}
	var _ memory.Device = dev
	ev := dev.NewEvent()
	dev.Record(ev, 0)
	if !dev.Query(ev) {
		t.Error("a recorded event of the double should be complete")
	}
	p, err := dev.Malloc(1 << 20)
	if err != nil || dev.TotalMemory() != 1<<32 {
		t.Fatalf("Malloc: %v; total %d", err, dev.TotalMemory())
	}
	if err := dev.Free(p); err != nil {
		t.Error(err)
	}
}
