//go:build cgo

package hccl

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"

	"github.com/gorun-dev/gorun/memory"
)

func (a *ACL) check(r C.gh_result, what string) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("acl: %s: error %d", what, int(r))
}

// The ACL runtime's primitive calls, for memory.RuntimeDevice.

// SetDevice sets the calling thread's current device.
func (a *ACL) SetDevice(i int) error {
	return a.check(C.gh_acl_set_device(a.t, C.int32_t(i)), "set device")
}

// CreateStream makes a stream.
func (a *ACL) CreateStream() (uintptr, error) {
	var s C.uintptr_t
	err := a.check(C.gh_acl_stream_create(a.t, &s), "create stream")
	return uintptr(s), err
}

// CreateEvent makes an event.
func (a *ACL) CreateEvent() (uintptr, error) {
	var e C.uintptr_t
	err := a.check(C.gh_acl_event_create(a.t, &e), "create event")
	return uintptr(e), err
}

// RecordEvent records e on s.
func (a *ACL) RecordEvent(e, s uintptr) error {
	return a.check(C.gh_acl_event_record(a.t, C.uintptr_t(e), C.uintptr_t(s)), "record event")
}

// EventDone is aclrtQueryEventStatus (status 1: complete).
func (a *ACL) EventDone(e uintptr) (bool, error) {
	var done C.int
	err := a.check(C.gh_acl_event_status(a.t, C.uintptr_t(e), &done), "query event")
	return done != 0, err
}

// StreamWaitEvent makes s wait for e.
func (a *ACL) StreamWaitEvent(s, e uintptr) error {
	return a.check(C.gh_acl_stream_wait_event(a.t, C.uintptr_t(s), C.uintptr_t(e)), "stream wait event")
}

// Malloc is aclrtMalloc (huge pages first).
func (a *ACL) Malloc(n int64) (uintptr, error) {
	var p C.uintptr_t
	err := a.check(C.gh_acl_malloc(a.t, &p, C.size_t(n)), "malloc")
	return uintptr(p), err
}

// Free is aclrtFree.
func (a *ACL) Free(p uintptr) error { return a.check(C.gh_acl_free(a.t, C.uintptr_t(p)), "free") }

// SynchronizeStream waits for s.
func (a *ACL) SynchronizeStream(s uintptr) error {
	return a.check(C.gh_acl_stream_synchronize(a.t, C.uintptr_t(s)), "synchronize stream")
}

// MemInfo is aclrtGetMemInfo for HBM.
func (a *ACL) MemInfo() (free, total int64, err error) {
	var f, t C.size_t
	err = a.check(C.gh_acl_mem_info(a.t, &f, &t), "get mem info")
	return int64(f), int64(t), err
}

// Copy copies n bytes (kind 1 host to device, 2 device to host) on stream
// s and waits for it.
func (a *ACL) Copy(dst, src uintptr, n, kind int, s uintptr) error {
	if err := a.check(C.gh_acl_memcpy(a.t, C.uintptr_t(dst), C.size_t(n), C.uintptr_t(src), C.size_t(n), C.int(kind), C.uintptr_t(s)), "memcpy"); err != nil {
		return err
	}
	return a.SynchronizeStream(s)
}

// Device is an NPU as a memory.Device.
type Device = memory.RuntimeDevice

// NewDevice opens NPU index of the ACL runtime.
func NewDevice(acl *ACL, index int) (*Device, error) { return memory.NewRuntimeDevice(acl, index) }
