//go:build cgo

package nccl

import (
	"encoding/binary"
	"math"
	"os"
	"runtime"
	"testing"
	"unsafe"
)

// TestRealNCCLOnTheGPU runs on a machine with a GPU (make test-gpu sets
// GORUN_TEST_GPU=1): one rank's all-reduce on device memory through the
// real NCCL and CUDA runtime, found as gorun finds them.
func TestRealNCCLOnTheGPU(t *testing.T) {
	if os.Getenv("GORUN_TEST_GPU") != "1" {
		t.Skip("GORUN_TEST_GPU=1 runs this on a GPU machine (make test-gpu)")
	}
	n, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	cu, err := OpenCUDA()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := n.Version()
	t.Logf("NCCL %d from %s; CUDA runtime from %s", v, n.Path, cu.Path)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, err := NewDevice(cu, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cu.SetDevice(0); err != nil {
		t.Fatal(err)
	}
	id, err := n.NewUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	comm, err := n.InitRank(1, 0, id)
	if err != nil {
		t.Fatal(err)
	}
	defer comm.Destroy()
	s := dev.NewStream()
	const count = 1 << 20
	buf, err := dev.Malloc(4 * count)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free(buf)
	host := make([]byte, 4*count)
	for i := range count {
		binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(float32(i%7)))
	}
	hp := uintptr(unsafe.Pointer(&host[0]))
	if err := cu.Copy(buf, hp, len(host), 1, dev.Handle(s)); err != nil {
		t.Fatal(err)
	}
	if err := comm.AllReduce(buf, buf, count, Float32, Sum, Stream(dev.Handle(s))); err != nil {
		t.Fatal(err)
	}
	if err := cu.Copy(hp, buf, len(host), 2, dev.Handle(s)); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(host)
	for i := range count {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(host[4*i:])); got != float32(i%7) {
			t.Fatalf("element %d = %v; want %v", i, got, float32(i%7))
		}
	}
}
