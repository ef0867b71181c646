//go:build cgo

package hccl

import (
	"context"
	"fmt"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/memory"
)

// NewGroup makes a process group over HCCL: rank 0 makes the root info
// and publishes it in st, every rank joins with its NPU set, and the
// group runs its collectives on its own ACL stream with the reuse engine
// of opt (opt.Device becomes dev).
func NewGroup(ctx context.Context, st comm.Store, rank, size int, h *HCCL, dev *memory.RuntimeDevice, opt comm.Options) (*comm.Group, error) {
	b, err := comm.ExchangeRootID(ctx, st, "pg/"+opt.Name+"/hccl-root-info", rank, len(RootInfo{}), func() ([]byte, error) {
		info, err := h.NewRootInfo()
		if err != nil {
			return nil, err
		}
		return info[:], nil
	})
	if err != nil {
		return nil, err
	}
	info := new(RootInfo)
	copy(info[:], b)
	var c *Comm
	if err := dev.Do(func() (err error) { c, err = h.InitRank(size, rank, info); return err }); err != nil {
		return nil, err
	}
	g, err := comm.NewDeviceGroup(rank, size, dev, func(stream uintptr) (comm.DeviceComm, error) {
		return &bound{c: c, s: Stream(stream)}, nil
	}, opt)
	if err != nil {
		_ = dev.Do(c.Destroy)
		return nil, err
	}
	return g, nil
}

// bound is a communicator bound to a group's stream (comm.DeviceComm).
type bound struct {
	c *Comm
	s Stream
}

var dataTypes = map[comm.DType]DataType{comm.Float32: Float32, comm.Float64: Float64, comm.BFloat16: BFloat16,
	comm.Float16: Float16, comm.Int32: Int32, comm.Int64: Int64, comm.Uint8: Uint8}

var reduceOps = map[comm.ReduceOp]ReduceOp{comm.Sum: Sum, comm.Min: Min, comm.Max: Max, comm.Prod: Prod}

// types maps comm's element type and reduction to HCCL's.
func types(d comm.DType, op comm.ReduceOp) (DataType, ReduceOp, error) {
	ro, ok := reduceOps[op]
	if !ok {
		return 0, 0, fmt.Errorf("hccl: %s is not an HCCL reduction (sum, prod, min, max): reduce with sum and divide", op)
	}
	dt, ok := dataTypes[d]
	if !ok {
		return 0, 0, fmt.Errorf("hccl: no HCCL type for %s", d)
	}
	return dt, ro, nil
}

func (b *bound) AllReduce(send, recv uintptr, count int, d comm.DType, op comm.ReduceOp) error {
	dt, ro, err := types(d, op)
	if err != nil {
		return err
	}
	return b.c.AllReduce(send, recv, count, dt, ro, b.s)
}

func (b *bound) AllGather(send, recv uintptr, n int) error {
	return b.c.AllGather(send, recv, n, Uint8, b.s)
}

func (b *bound) ReduceScatter(send, recv uintptr, count int, d comm.DType, op comm.ReduceOp) error {
	dt, ro, err := types(d, op)
	if err != nil {
		return err
	}
	return b.c.ReduceScatter(send, recv, count, dt, ro, b.s)
}

func (b *bound) Broadcast(buf uintptr, n, root int) error {
	return b.c.Broadcast(buf, n, Uint8, root, b.s)
}

func (b *bound) AllToAll(send, recv uintptr, n int) error {
	return b.c.AllToAll(send, recv, n, Uint8, b.s)
}

func (b *bound) Send(buf uintptr, n, peer int) error { return b.c.Send(buf, n, Uint8, peer, b.s) }
func (b *bound) Recv(buf uintptr, n, peer int) error { return b.c.Recv(buf, n, Uint8, peer, b.s) }
func (b *bound) Barrier() error                      { return b.c.Barrier(b.s) }

// Abort destroys the communicator: HCCL has no abort.
func (b *bound) Abort() error { return b.c.Destroy() }
func (b *bound) Free() error  { return nil }
