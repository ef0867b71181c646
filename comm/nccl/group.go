//go:build cgo

package nccl

import (
	"context"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/memory"
)

// NewGroup makes a process group over NCCL: rank 0 makes the
// communicator's unique id and publishes it in st, every rank joins with
// its device set, and the group runs its collectives on its own CUDA
// stream with the reuse engine of opt (opt.Device becomes dev).
func NewGroup(ctx context.Context, st comm.Store, rank, size int, n *NCCL, dev *memory.RuntimeDevice, opt comm.Options) (*comm.Group, error) {
	var id UniqueID
	b, err := comm.ExchangeRootID(ctx, st, "pg/"+opt.Name+"/nccl-unique-id", rank, len(id), func() ([]byte, error) {
		id, err := n.NewUniqueID()
		return id[:], err
	})
	if err != nil {
		return nil, err
	}
	copy(id[:], b)
	var c *Comm
	if err := dev.Do(func() (err error) { c, err = n.InitRank(size, rank, id); return err }); err != nil {
		return nil, err
	}
	g, err := comm.NewDeviceGroup(rank, size, dev, codes, func(stream uintptr) (comm.DeviceComm, error) {
		one, err := dev.Malloc(1)
		if err != nil {
			return nil, err
		}
		return &bound{n: n, c: c, s: Stream(stream), size: size, one: one, dev: dev}, nil
	}, opt)
	if err != nil {
		_ = dev.Do(c.Destroy)
		return nil, err
	}
	return g, nil
}

// bound is a communicator bound to a group's stream (comm.DeviceComm).
type bound struct {
	n    *NCCL
	c    *Comm
	s    Stream
	size int
	one  uintptr // a byte of device memory for Barrier
	dev  *memory.RuntimeDevice
}

// codes are NCCL's element types and reductions.
var codes = comm.VendorCodes{Library: "nccl",
	DTypes: map[comm.DType]int{comm.Float32: int(Float32), comm.Float64: int(Float64), comm.BFloat16: int(BFloat16),
		comm.Float16: int(Float16), comm.Int32: int(Int32), comm.Int64: int(Int64), comm.Uint8: int(Uint8)},
	Ops: map[comm.ReduceOp]int{comm.Sum: int(Sum), comm.Avg: int(Avg), comm.Min: int(Min), comm.Max: int(Max), comm.Prod: int(Prod)}}

func (b *bound) AllReduce(send, recv uintptr, count, dt, op int) error {
	return b.c.AllReduce(send, recv, count, DataType(dt), RedOp(op), b.s)
}

func (b *bound) ReduceScatter(send, recv uintptr, count, dt, op int) error {
	return b.c.ReduceScatter(send, recv, count, DataType(dt), RedOp(op), b.s)
}

func (b *bound) AllGather(send, recv uintptr, n int) error {
	return b.c.AllGather(send, recv, n, Uint8, b.s)
}

func (b *bound) Broadcast(buf uintptr, n, root int) error {
	return b.c.Broadcast(buf, buf, n, Uint8, root, b.s)
}

// AllToAll is one group of sends and receives, a pair per rank.
func (b *bound) AllToAll(send, recv uintptr, n int) error {
	if err := b.n.GroupStart(); err != nil {
		return err
	}
	for p := range b.size {
		off := uintptr(p * n)
		if err := b.c.Send(send+off, n, Uint8, p, b.s); err != nil {
			_ = b.n.GroupEnd()
			return err
		}
		if err := b.c.Recv(recv+off, n, Uint8, p, b.s); err != nil {
			_ = b.n.GroupEnd()
			return err
		}
	}
	return b.n.GroupEnd()
}

func (b *bound) Send(buf uintptr, n, peer int) error { return b.c.Send(buf, n, Uint8, peer, b.s) }
func (b *bound) Recv(buf uintptr, n, peer int) error { return b.c.Recv(buf, n, Uint8, peer, b.s) }

// Barrier all-reduces one byte (NCCL has no barrier).
func (b *bound) Barrier() error { return b.c.AllReduce(b.one, b.one, 1, Uint8, Max, b.s) }

func (b *bound) AsyncError() error { return b.c.AsyncError() }
func (b *bound) Abort() error      { return b.c.Abort() }
func (b *bound) Free() error       { return b.dev.Free(b.one) }
