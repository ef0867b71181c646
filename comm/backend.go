package comm

import (
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// Backend carries a group's collectives: the CPU backend on host memory,
// or a vendor library (comm/nccl, comm/hccl) on device memory. A Group
// runs every call on its own stream, in order, one at a time; each call
// returns once the operation is done (CPU) or enqueued on the device
// (vendor libraries), or by the deadline with an error.
type Backend interface {
	AllReduce(t *memory.Tensor, d DType, op ReduceOp, deadline time.Time) error
	AllGather(out, in *memory.Tensor, deadline time.Time) error
	ReduceScatter(out, in *memory.Tensor, d DType, op ReduceOp, deadline time.Time) error
	Broadcast(t *memory.Tensor, root int, deadline time.Time) error
	AllToAll(out, in *memory.Tensor, deadline time.Time) error
	Send(t *memory.Tensor, peer int, deadline time.Time) error
	Recv(t *memory.Tensor, peer int, deadline time.Time) error
	Barrier(deadline time.Time) error
	// Shutdown ends the group's links: running and later calls fail.
	Shutdown()
	// Release frees what the backend holds, once no call runs.
	Release()
}
