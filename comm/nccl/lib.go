//go:build cgo

package nccl

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/gorun-dev/gorun/internal/sys/dlsearch"
)

// LibraryEnv and CUDARuntimeEnv name the variables that point at the
// libraries; without them the dynamic loader's search (LD_LIBRARY_PATH,
// the loader cache, the standard directories) is tried, then the
// nvidia/*/lib folders of Python's site-packages, where PyTorch's wheels
// put them.
const (
	LibraryEnv     = "GORUN_NCCL_LIBRARY"
	CUDARuntimeEnv = "GORUN_CUDART_LIBRARY"
)

// NCCL is an opened NCCL library: its functions, found by dlsym.
type NCCL struct {
	t    *C.gr_nccl
	Path string
}

// CUDA is an opened CUDA runtime library.
type CUDA struct {
	t    *C.gr_cuda
	Path string
}

// Open finds and opens NCCL (see LibraryEnv).
func Open() (*NCCL, error) {
	var n *NCCL
	err := dlsearch.Find(dlsearch.Spec{What: "NCCL", Env: LibraryEnv, Names: []string{"libnccl.so.2", "libnccl.so"},
		Globs: dlsearch.SitePackages("nvidia/nccl/lib/libnccl.so.2")}, func(p string) (err error) {
		n, err = OpenPath(p)
		return err
	})
	return n, err
}

// OpenPath opens the NCCL library at path.
func OpenPath(path string) (*NCCL, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [512]C.char
	runtime.LockOSThread() // dlerror is per thread
	t := C.gr_nccl_open(cpath, &buf[0], C.int(len(buf)))
	runtime.UnlockOSThread()
	if t == nil {
		return nil, fmt.Errorf("nccl: open %s: %s", path, C.GoString(&buf[0]))
	}
	return &NCCL{t: t, Path: path}, nil
}

// OpenCUDA finds and opens the CUDA runtime (see CUDARuntimeEnv).
func OpenCUDA() (*CUDA, error) {
	var c *CUDA
	err := dlsearch.Find(dlsearch.Spec{What: "CUDA runtime", Env: CUDARuntimeEnv, Names: []string{"libcudart.so.12", "libcudart.so.11.0", "libcudart.so"},
		Globs: dlsearch.SitePackages("nvidia/cuda_runtime/lib/libcudart.so.12")}, func(p string) (err error) {
		c, err = OpenCUDAPath(p)
		return err
	})
	return c, err
}

// OpenCUDAPath opens the CUDA runtime at path.
func OpenCUDAPath(path string) (*CUDA, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [512]C.char
	runtime.LockOSThread()
	t := C.gr_cuda_open(cpath, &buf[0], C.int(len(buf)))
	runtime.UnlockOSThread()
	if t == nil {
		return nil, fmt.Errorf("cuda: open %s: %s", path, C.GoString(&buf[0]))
	}
	return &CUDA{t: t, Path: path}, nil
}

// Result is an NCCL or CUDA status code.
type Result int

func (n *NCCL) check(r C.gr_result, what string) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("nccl: %s: %s (%d)", what, C.GoString(C.gr_nccl_error_string(n.t, r)), int(r))
}

// Version is ncclGetVersion's number (e.g. 22105 for 2.21.5).
func (n *NCCL) Version() (int, error) {
	var v C.int
	return int(v), n.check(C.gr_nccl_get_version(n.t, &v), "get version")
}

// UniqueID is the 128 bytes rank 0 makes and the others receive.
type UniqueID [128]byte

// NewUniqueID makes a communicator id (on rank 0).
func (n *NCCL) NewUniqueID() (UniqueID, error) {
	var id C.gr_unique_id
	if err := n.check(C.gr_nccl_get_unique_id(n.t, &id), "get unique id"); err != nil {
		return UniqueID{}, err
	}
	return *(*UniqueID)(unsafe.Pointer(&id)), nil
}

// Comm is a communicator of one rank.
type Comm struct {
	n          *NCCL
	c          C.gr_comm
	rank, size int
}

// InitRank joins the communicator id as rank of size. The CUDA device
// must be set on the calling OS thread (see CUDA.SetDevice); the call
// waits for every rank.
func (n *NCCL) InitRank(size, rank int, id UniqueID) (*Comm, error) {
	var c C.gr_comm
	cid := (*C.gr_unique_id)(unsafe.Pointer(&id))
	if err := n.check(C.gr_nccl_comm_init_rank(n.t, &c, C.int(size), cid, C.int(rank)), "init rank"); err != nil {
		return nil, err
	}
	return &Comm{n: n, c: c, rank: rank, size: size}, nil
}

// DataType is an NCCL element type; RedOp an NCCL reduction.
type (
	DataType int
	RedOp    int
)

// NCCL's element types and reductions (nccl.h).
const (
	Uint8    DataType = 1
	Int32    DataType = 2
	Int64    DataType = 4
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	BFloat16 DataType = 9

	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4
)

// Stream is a cudaStream_t.
type Stream uintptr

// AllReduce reduces count elements of send into recv across the ranks,
// enqueued on stream.
func (c *Comm) AllReduce(send, recv uintptr, count int, dt DataType, op RedOp, s Stream) error {
	return c.n.check(C.gr_nccl_all_reduce(c.n.t, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(op), c.c, C.uintptr_t(s)), "all_reduce")
}

// AllGather gathers count elements from every rank into recv.
func (c *Comm) AllGather(send, recv uintptr, count int, dt DataType, s Stream) error {
	return c.n.check(C.gr_nccl_all_gather(c.n.t, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), c.c, C.uintptr_t(s)), "all_gather")
}

// ReduceScatter reduces and leaves count elements per rank in recv.
func (c *Comm) ReduceScatter(send, recv uintptr, count int, dt DataType, op RedOp, s Stream) error {
	return c.n.check(C.gr_nccl_reduce_scatter(c.n.t, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(op), c.c, C.uintptr_t(s)), "reduce_scatter")
}

// Broadcast copies root's count elements to every rank's recv.
func (c *Comm) Broadcast(send, recv uintptr, count int, dt DataType, root int, s Stream) error {
	return c.n.check(C.gr_nccl_broadcast(c.n.t, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(root), c.c, C.uintptr_t(s)), "broadcast")
}

// Send sends count elements to peer.
func (c *Comm) Send(send uintptr, count int, dt DataType, peer int, s Stream) error {
	return c.n.check(C.gr_nccl_send(c.n.t, C.uintptr_t(send), C.size_t(count), C.int(dt), C.int(peer), c.c, C.uintptr_t(s)), "send")
}

// Recv receives count elements from peer.
func (c *Comm) Recv(recv uintptr, count int, dt DataType, peer int, s Stream) error {
	return c.n.check(C.gr_nccl_recv(c.n.t, C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(peer), c.c, C.uintptr_t(s)), "recv")
}

// GroupStart and GroupEnd batch the calls between them.
func (n *NCCL) GroupStart() error { return n.check(C.gr_nccl_group_start(n.t), "group start") }

// GroupEnd ends a batch.
func (n *NCCL) GroupEnd() error { return n.check(C.gr_nccl_group_end(n.t), "group end") }

// AsyncError is the communicator's asynchronous error, if any.
func (c *Comm) AsyncError() error {
	var r C.gr_result
	if err := c.n.check(C.gr_nccl_comm_get_async_error(c.n.t, c.c, &r), "get async error"); err != nil {
		return err
	}
	return c.n.check(r, "asynchronous error")
}

// Abort ends the communicator at once (after a failure or a timeout).
func (c *Comm) Abort() error { return c.n.check(C.gr_nccl_comm_abort(c.n.t, c.c), "abort") }

// Destroy frees the communicator.
func (c *Comm) Destroy() error { return c.n.check(C.gr_nccl_comm_destroy(c.n.t, c.c), "destroy") }

// ErrNotReady is cudaEventQuery's "not yet".
var ErrNotReady = errors.New("cuda: not ready")

func (c *CUDA) check(r C.gr_result, what string) error {
	switch r {
	case 0:
		return nil
	case 600:
		return ErrNotReady
	}
	return fmt.Errorf("cuda: %s: %s (%d)", what, C.GoString(C.gr_cuda_error_string(c.t, r)), int(r))
}
