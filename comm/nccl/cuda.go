//go:build cgo

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"errors"

	"github.com/gorun-dev/gorun/memory"
)

// The CUDA runtime's primitive calls, for memory.RuntimeDevice.

// SetDevice sets the calling thread's current device.
func (c *CUDA) SetDevice(i int) error {
	return c.check(C.gr_cuda_set_device(c.t, C.int(i)), "set device")
}

// CreateStream makes a non-blocking stream.
func (c *CUDA) CreateStream() (uintptr, error) {
	var s C.uintptr_t
	err := c.check(C.gr_cuda_stream_create(c.t, &s), "create stream")
	return uintptr(s), err
}

// CreateEvent makes an event without timing.
func (c *CUDA) CreateEvent() (uintptr, error) {
	var e C.uintptr_t
	err := c.check(C.gr_cuda_event_create(c.t, &e), "create event")
	return uintptr(e), err
}

// RecordEvent records e on s.
func (c *CUDA) RecordEvent(e, s uintptr) error {
	return c.check(C.gr_cuda_event_record(c.t, C.uintptr_t(e), C.uintptr_t(s)), "record event")
}

// EventDone is cudaEventQuery: done, not yet, or an error.
func (c *CUDA) EventDone(e uintptr) (bool, error) {
	err := c.check(C.gr_cuda_event_query(c.t, C.uintptr_t(e)), "query event")
	if errors.Is(err, ErrNotReady) {
		return false, nil
	}
	return err == nil, err
}

// StreamWaitEvent makes s wait for e.
func (c *CUDA) StreamWaitEvent(s, e uintptr) error {
	return c.check(C.gr_cuda_stream_wait_event(c.t, C.uintptr_t(s), C.uintptr_t(e)), "stream wait event")
}

// Malloc is cudaMalloc.
func (c *CUDA) Malloc(n int64) (uintptr, error) {
	var p C.uintptr_t
	err := c.check(C.gr_cuda_malloc(c.t, &p, C.size_t(n)), "malloc")
	return uintptr(p), err
}

// Free is cudaFree.
func (c *CUDA) Free(p uintptr) error { return c.check(C.gr_cuda_free(c.t, C.uintptr_t(p)), "free") }

// SynchronizeStream waits for s.
func (c *CUDA) SynchronizeStream(s uintptr) error {
	return c.check(C.gr_cuda_stream_synchronize(c.t, C.uintptr_t(s)), "synchronize stream")
}

// MemInfo is cudaMemGetInfo.
func (c *CUDA) MemInfo() (free, total int64, err error) {
	var f, t C.size_t
	err = c.check(C.gr_cuda_mem_get_info(c.t, &f, &t), "mem get info")
	return int64(f), int64(t), err
}

// Copy copies n bytes (kind 1 host to device, 2 device to host) on stream
// s and waits for it.
func (c *CUDA) Copy(dst, src uintptr, n, kind int, s uintptr) error {
	if err := c.check(C.gr_cuda_memcpy(c.t, C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), C.int(kind), C.uintptr_t(s)), "memcpy"); err != nil {
		return err
	}
	return c.SynchronizeStream(s)
}

// Device is a CUDA device as a memory.Device.
type Device = memory.RuntimeDevice

// NewDevice opens device index of the CUDA runtime cu.
func NewDevice(cu *CUDA, index int) (*Device, error) { return memory.NewRuntimeDevice(cu, index) }
