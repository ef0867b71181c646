//go:build cgo

package hccl

import (
	"context"

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
	g, err := comm.NewDeviceGroup(rank, size, dev, codes, func(stream uintptr) (comm.DeviceComm, error) {
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

// codes are HCCL's element types and reductions: it has no average.
var codes = comm.VendorCodes{Library: "hccl", OpsHint: " (sum, prod, min or max: reduce with sum and divide for an average)",
	DTypes: map[comm.DType]int{comm.Float32: int(Float32), comm.Float64: int(Float64), comm.BFloat16: int(BFloat16),
		comm.Float16: int(Float16), comm.Int32: int(Int32), comm.Int64: int(Int64), comm.Uint8: int(Uint8)},
	Ops: map[comm.ReduceOp]int{comm.Sum: int(Sum), comm.Min: int(Min), comm.Max: int(Max), comm.Prod: int(Prod)}}

func (b *bound) AllReduce(send, recv uintptr, count, dt, op int) error {
	return b.c.AllReduce(send, recv, count, DataType(dt), ReduceOp(op), b.s)
}

func (b *bound) ReduceScatter(send, recv uintptr, count, dt, op int) error {
	return b.c.ReduceScatter(send, recv, count, DataType(dt), ReduceOp(op), b.s)
}

func (b *bound) AllGather(send, recv uintptr, n int) error {
	return b.c.AllGather(send, recv, n, Uint8, b.s)
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
func (b *bound) AsyncError() error { return b.c.AsyncError() }
func (b *bound) Abort() error      { return b.c.Destroy() }
func (b *bound) Free() error       { return nil }
