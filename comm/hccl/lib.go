//go:build cgo

package hccl

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/gorun-dev/gorun/internal/sys/dlsearch"
)

// LibraryEnv and ACLEnv point at libhccl.so and libascendcl.so; without
// them the dynamic loader's search is tried, then CANN's install folders.
const (
	LibraryEnv = "GORUN_HCCL_LIBRARY"
	ACLEnv     = "GORUN_ACL_LIBRARY"
)

// cann are the folders of a CANN toolkit install.
func cann(lib string) []string {
	return []string{"/usr/local/Ascend/ascend-toolkit/latest/lib64/" + lib, "/usr/local/Ascend/ascend-toolkit/latest/*/lib64/" + lib,
		"/usr/local/Ascend/latest/lib64/" + lib}
}

// HCCL is an opened HCCL library.
type HCCL struct {
	t    *C.gh_hccl
	Path string
}

// ACL is an opened ACL runtime library.
type ACL struct {
	t    *C.gh_acl
	Path string
}

// Open finds and opens HCCL (see LibraryEnv).
func Open() (*HCCL, error) {
	var h *HCCL
	err := dlsearch.Find(dlsearch.Spec{What: "HCCL", Env: LibraryEnv, Names: []string{"libhccl.so"}, Globs: cann("libhccl.so")},
		func(p string) (err error) { h, err = OpenPath(p); return err })
	return h, err
}

// OpenPath opens the HCCL library at path.
func OpenPath(path string) (*HCCL, error) {
	var t *C.gh_hccl
	err := open(path, func(cpath *C.char, buf *C.char, n C.int) bool { t = C.gh_hccl_open(cpath, buf, n); return t != nil })
	if err != nil {
		return nil, fmt.Errorf("hccl: open %s: %w", path, err)
	}
	return &HCCL{t: t, Path: path}, nil
}

// OpenACL finds and opens the ACL runtime (see ACLEnv).
func OpenACL() (*ACL, error) {
	var a *ACL
	err := dlsearch.Find(dlsearch.Spec{What: "ACL runtime", Env: ACLEnv, Names: []string{"libascendcl.so"}, Globs: cann("libascendcl.so")},
		func(p string) (err error) { a, err = OpenACLPath(p); return err })
	return a, err
}

// OpenACLPath opens the ACL runtime at path.
func OpenACLPath(path string) (*ACL, error) {
	var t *C.gh_acl
	err := open(path, func(cpath *C.char, buf *C.char, n C.int) bool { t = C.gh_acl_open(cpath, buf, n); return t != nil })
	if err != nil {
		return nil, fmt.Errorf("acl: open %s: %w", path, err)
	}
	return &ACL{t: t, Path: path}, nil
}

// open runs a loader on one locked thread (dlerror is per thread).
func open(path string, load func(cpath, buf *C.char, n C.int) bool) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [512]C.char
	runtime.LockOSThread()
	ok := load(cpath, &buf[0], C.int(len(buf)))
	runtime.UnlockOSThread()
	if !ok {
		return fmt.Errorf("%s", C.GoString(&buf[0]))
	}
	return nil
}

func (h *HCCL) check(r C.gh_result, what string) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("hccl: %s: %s (%d)", what, C.GoString(C.gh_hccl_error_string(h.t, r)), int(r))
}

// RootInfo is the 4108 bytes rank 0 makes and the others receive.
type RootInfo [4108]byte

// NewRootInfo makes a communicator's root info (on rank 0).
func (h *HCCL) NewRootInfo() (*RootInfo, error) {
	var info C.gh_root_info
	if err := h.check(C.gh_hccl_get_root_info(h.t, &info), "get root info"); err != nil {
		return nil, err
	}
	out := new(RootInfo)
	*out = *(*RootInfo)(unsafe.Pointer(&info))
	return out, nil
}

// Comm is a communicator of one rank.
type Comm struct {
	h          *HCCL
	c          C.uintptr_t
	rank, size int
}

// InitRank joins the communicator of info as rank of size; the device
// must be set on the calling thread.
func (h *HCCL) InitRank(size, rank int, info *RootInfo) (*Comm, error) {
	var c C.uintptr_t
	if err := h.check(C.gh_hccl_comm_init(h.t, C.uint32_t(size), (*C.gh_root_info)(unsafe.Pointer(info)), C.uint32_t(rank), &c), "init root info"); err != nil {
		return nil, err
	}
	return &Comm{h: h, c: c, rank: rank, size: size}, nil
}

// DataType is an HCCL element type; ReduceOp an HCCL reduction (HCCL has
// no average).
type (
	DataType int
	ReduceOp int
)

// HCCL's element types and reductions (hccl_types.h).
const (
	Int32    DataType = 2
	Float16  DataType = 3
	Float32  DataType = 4
	Int64    DataType = 5
	Uint8    DataType = 7
	Float64  DataType = 10
	BFloat16 DataType = 11

	Sum  ReduceOp = 0
	Prod ReduceOp = 1
	Max  ReduceOp = 2
	Min  ReduceOp = 3
)

// Stream is an aclrtStream.
type Stream uintptr

// AllReduce reduces count elements of send into recv.
func (c *Comm) AllReduce(send, recv uintptr, count int, dt DataType, op ReduceOp, s Stream) error {
	return c.h.check(C.gh_hccl_all_reduce(c.h.t, C.uintptr_t(send), C.uintptr_t(recv), C.uint64_t(count), C.int(dt), C.int(op), c.c, C.uintptr_t(s)), "all_reduce")
}

// AllGather gathers count elements from every rank into recv.
func (c *Comm) AllGather(send, recv uintptr, count int, dt DataType, s Stream) error {
	return c.h.check(C.gh_hccl_all_gather(c.h.t, C.uintptr_t(send), C.uintptr_t(recv), C.uint64_t(count), C.int(dt), c.c, C.uintptr_t(s)), "all_gather")
}

// ReduceScatter reduces and leaves count elements per rank in recv.
func (c *Comm) ReduceScatter(send, recv uintptr, count int, dt DataType, op ReduceOp, s Stream) error {
	return c.h.check(C.gh_hccl_reduce_scatter(c.h.t, C.uintptr_t(send), C.uintptr_t(recv), C.uint64_t(count), C.int(dt), C.int(op), c.c, C.uintptr_t(s)), "reduce_scatter")
}

// Broadcast copies root's buf to every rank, in place.
func (c *Comm) Broadcast(buf uintptr, count int, dt DataType, root int, s Stream) error {
	return c.h.check(C.gh_hccl_broadcast(c.h.t, C.uintptr_t(buf), C.uint64_t(count), C.int(dt), C.uint32_t(root), c.c, C.uintptr_t(s)), "broadcast")
}

// Send sends count elements to peer.
func (c *Comm) Send(buf uintptr, count int, dt DataType, peer int, s Stream) error {
	return c.h.check(C.gh_hccl_send(c.h.t, C.uintptr_t(buf), C.uint64_t(count), C.int(dt), C.uint32_t(peer), c.c, C.uintptr_t(s)), "send")
}

// Recv receives count elements from peer.
func (c *Comm) Recv(buf uintptr, count int, dt DataType, peer int, s Stream) error {
	return c.h.check(C.gh_hccl_recv(c.h.t, C.uintptr_t(buf), C.uint64_t(count), C.int(dt), C.uint32_t(peer), c.c, C.uintptr_t(s)), "recv")
}

// AllToAll sends count elements to every rank and receives count from
// each, in rank order.
func (c *Comm) AllToAll(send, recv uintptr, count int, dt DataType, s Stream) error {
	return c.h.check(C.gh_hccl_all_to_all(c.h.t, C.uintptr_t(send), C.uint64_t(count), C.int(dt), C.uintptr_t(recv), c.c, C.uintptr_t(s)), "all_to_all")
}

// Barrier waits for every rank.
func (c *Comm) Barrier(s Stream) error {
	return c.h.check(C.gh_hccl_barrier(c.h.t, c.c, C.uintptr_t(s)), "barrier")
}

// AsyncError is the communicator's asynchronous error, if any.
func (c *Comm) AsyncError() error {
	var r C.gh_result
	if err := c.h.check(C.gh_hccl_async_error(c.h.t, c.c, &r), "get async error"); err != nil {
		return err
	}
	return c.h.check(r, "asynchronous error")
}

// Destroy frees the communicator (HCCL has no abort).
func (c *Comm) Destroy() error { return c.h.check(C.gh_hccl_comm_destroy(c.h.t, c.c), "destroy") }
