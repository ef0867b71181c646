//go:build cgo

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// Device is one CUDA device as a memory.Device: streams, events and
// memory through the CUDA runtime. The current device is per OS thread,
// so every call locks its goroutine's thread and sets the device first.
type Device struct {
	cu    *CUDA
	index int

	mu      sync.Mutex
	streams []uintptr // memory.Stream -> cudaStream_t; 0 is the legacy default stream
	nextEv  int
}

// NewDevice opens device index of the CUDA runtime cu.
func NewDevice(cu *CUDA, index int) (*Device, error) {
	d := &Device{cu: cu, index: index, streams: []uintptr{0}}
	return d, d.do(func() error { return nil })
}

// do runs fn on a locked thread with the device set.
func (d *Device) do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.cu.check(C.gr_cuda_set_device(d.cu.t, C.int(d.index)), "set device"); err != nil {
		return err
	}
	return fn()
}

// Handle is the cudaStream_t of s, for NCCL calls.
func (d *Device) Handle(s memory.Stream) Stream {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Stream(d.streams[s])
}

// TotalMemory implements memory.Device.
func (d *Device) TotalMemory() int64 { _, total := d.memInfo(); return total }

// FreeMemory implements memory.Device.
func (d *Device) FreeMemory() int64 { free, _ := d.memInfo(); return free }

func (d *Device) memInfo() (free, total int64) {
	_ = d.do(func() error {
		var f, t C.size_t
		err := d.cu.check(C.gr_cuda_mem_get_info(d.cu.t, &f, &t), "mem get info")
		free, total = int64(f), int64(t)
		return err
	})
	return
}

// Malloc implements memory.Device (cudaMalloc).
func (d *Device) Malloc(size int64) (uintptr, error) {
	var p C.uintptr_t
	err := d.do(func() error { return d.cu.check(C.gr_cuda_malloc(d.cu.t, &p, C.size_t(size)), "malloc") })
	if err != nil {
		return 0, fmt.Errorf("%w: %w", memory.ErrDeviceMemory, err)
	}
	return uintptr(p), nil
}

// Free implements memory.Device.
func (d *Device) Free(ptr uintptr) error {
	return d.do(func() error { return d.cu.check(C.gr_cuda_free(d.cu.t, C.uintptr_t(ptr)), "free") })
}

// errNoVMM: expandable segments need the CUDA driver's virtual memory
// calls, which this binding does not load yet.
var errNoVMM = errors.New("cuda: expandable segments need the driver API (cuMemAddressReserve/cuMemMap), not loaded by this binding: use fixed segments")

// ReserveAddress implements memory.Device.
func (d *Device) ReserveAddress(int64) (uintptr, error) { return 0, errNoVMM }

// MapPages implements memory.Device.
func (d *Device) MapPages(uintptr, int64) error { return errNoVMM }

// UnmapPages implements memory.Device.
func (d *Device) UnmapPages(uintptr, int64) error { return errNoVMM }

// NewStream implements memory.Device (a non-blocking stream).
func (d *Device) NewStream() memory.Stream {
	var s C.uintptr_t
	if err := d.do(func() error { return d.cu.check(C.gr_cuda_stream_create(d.cu.t, &s), "stream create") }); err != nil {
		panic(err) // the interface has no error: a device that cannot make a stream is unusable
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.streams = append(d.streams, uintptr(s))
	return memory.Stream(len(d.streams) - 1)
}

type cudaEvent struct {
	id int
	h  uintptr
}

func (e *cudaEvent) ID() int { return e.id }

// NewEvent implements memory.Device.
func (d *Device) NewEvent() memory.Event {
	var h C.uintptr_t
	if err := d.do(func() error { return d.cu.check(C.gr_cuda_event_create(d.cu.t, &h), "event create") }); err != nil {
		panic(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nextEv++
	return &cudaEvent{id: d.nextEv, h: uintptr(h)}
}

// Record implements memory.Device.
func (d *Device) Record(e memory.Event, s memory.Stream) {
	h := d.Handle(s)
	_ = d.do(func() error {
		return d.cu.check(C.gr_cuda_event_record(d.cu.t, C.uintptr_t(e.(*cudaEvent).h), C.uintptr_t(h)), "event record")
	})
}

// Query implements memory.Device.
func (d *Device) Query(e memory.Event) bool {
	var err error
	_ = d.do(func() error {
		err = d.cu.check(C.gr_cuda_event_query(d.cu.t, C.uintptr_t(e.(*cudaEvent).h)), "event query")
		return nil
	})
	return err == nil
}

// Synchronize implements memory.Device: polls, so that ctx can end the
// wait.
func (d *Device) Synchronize(ctx context.Context, e memory.Event) error {
	for delay := 10 * time.Microsecond; !d.Query(e); delay = min(2*delay, time.Millisecond) {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// StreamWait implements memory.Device.
func (d *Device) StreamWait(s memory.Stream, e memory.Event) {
	h := d.Handle(s)
	_ = d.do(func() error {
		return d.cu.check(C.gr_cuda_stream_wait_event(d.cu.t, C.uintptr_t(h), C.uintptr_t(e.(*cudaEvent).h)), "stream wait event")
	})
}

// Launch implements memory.Device: host work runs once the stream has
// drained (this binding does not load cudaLaunchHostFunc); device work is
// enqueued by NCCL calls on Handle(s) instead.
func (d *Device) Launch(s memory.Stream, op memory.Op) {
	h := d.Handle(s)
	_ = d.do(func() error {
		return d.cu.check(C.gr_cuda_stream_synchronize(d.cu.t, C.uintptr_t(h)), "stream synchronize")
	})
	if op.Gate != nil {
		<-op.Gate
	}
	if op.Run != nil {
		op.Run()
	}
}

// Bytes implements memory.Device: device memory is not host memory.
func (d *Device) Bytes(uintptr, int64) []byte { return nil }

// CopyToDevice and CopyToHost move bytes between host and device memory
// on stream s (synchronised before they return).
func (d *Device) CopyToDevice(dst uintptr, src []byte, s memory.Stream) error {
	return d.copy(dst, hostAddr(src), len(src), 1, s)
}

// CopyToHost copies len(dst) bytes from device memory at src.
func (d *Device) CopyToHost(dst []byte, src uintptr, s memory.Stream) error {
	return d.copy(hostAddr(dst), src, len(dst), 2, s)
}

func (d *Device) copy(dst, src uintptr, n, kind int, s memory.Stream) error {
	h := d.Handle(s)
	return d.do(func() error {
		if err := d.cu.check(C.gr_cuda_memcpy(d.cu.t, C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), C.int(kind), C.uintptr_t(h)), "memcpy"); err != nil {
			return err
		}
		return d.cu.check(C.gr_cuda_stream_synchronize(d.cu.t, C.uintptr_t(h)), "stream synchronize")
	})
}
