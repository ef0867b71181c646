//go:build cgo

package nccl

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/memory"
)

// NewGroup makes a process group over NCCL: rank 0 makes the
// communicator's unique id and publishes it in st, every rank joins with
// its device set, and the group runs its collectives on its own CUDA
// stream with the reuse engine of opt. opt.Device must be dev.
func NewGroup(ctx context.Context, st comm.Store, rank, size int, n *NCCL, dev *memory.RuntimeDevice, opt comm.Options) (*comm.Group, error) {
	key := "pg/" + opt.Name + "/nccl-unique-id"
	var id UniqueID
	if rank == 0 {
		var err error
		if id, err = n.NewUniqueID(); err != nil {
			return nil, err
		}
		if err := st.Set(ctx, key, hex.EncodeToString(id[:])); err != nil {
			return nil, err
		}
	} else {
		v, err := st.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		b, err := hex.DecodeString(v)
		if err != nil || len(b) != len(id) {
			return nil, fmt.Errorf("nccl: the unique id in the store is not %d bytes of hex", len(id))
		}
		copy(id[:], b)
	}
	var c *Comm
	if err := dev.Do(func() (err error) { c, err = n.InitRank(size, rank, id); return err }); err != nil {
		return nil, err
	}
	opt.Device = dev
	return comm.NewGroupOn(rank, size, func(s memory.Stream) (comm.Backend, error) {
		b := &backend{n: n, dev: dev, c: c, stream: Stream(dev.Handle(s)), size: size}
		var err error
		if b.one, err = dev.Malloc(1); err != nil {
			return nil, err
		}
		return b, nil
	}, opt)
}

// backend is comm.Backend on NCCL: every call enqueues on the group's
// stream, on a thread with the device set.
type backend struct {
	n      *NCCL
	dev    *memory.RuntimeDevice
	c      *Comm
	stream Stream
	size   int
	one    uintptr // a byte of device memory for Barrier
}

var dataTypes = map[comm.DType]DataType{comm.Float32: Float32, comm.Float64: Float64, comm.BFloat16: BFloat16,
	comm.Float16: Float16, comm.Int32: Int32, comm.Int64: Int64, comm.Uint8: Uint8}

var redOps = map[comm.ReduceOp]RedOp{comm.Sum: Sum, comm.Avg: Avg, comm.Min: Min, comm.Max: Max, comm.Prod: Prod}

func (b *backend) on(fn func() error) error { return b.dev.Do(fn) }

func (b *backend) AllReduce(t *memory.Tensor, d comm.DType, op comm.ReduceOp, _ time.Time) error {
	p := t.Region().Ptr
	return b.on(func() error { return b.c.AllReduce(p, p, int(t.Size())/d.Size(), dataTypes[d], redOps[op], b.stream) })
}

func (b *backend) AllGather(out, in *memory.Tensor, _ time.Time) error {
	return b.on(func() error { return b.c.AllGather(in.Region().Ptr, out.Region().Ptr, int(in.Size()), Uint8, b.stream) })
}

func (b *backend) ReduceScatter(out, in *memory.Tensor, d comm.DType, op comm.ReduceOp, _ time.Time) error {
	return b.on(func() error {
		return b.c.ReduceScatter(in.Region().Ptr, out.Region().Ptr, int(out.Size())/d.Size(), dataTypes[d], redOps[op], b.stream)
	})
}

func (b *backend) Broadcast(t *memory.Tensor, root int, _ time.Time) error {
	p := t.Region().Ptr
	return b.on(func() error { return b.c.Broadcast(p, p, int(t.Size()), Uint8, root, b.stream) })
}

// AllToAll is a group of sends and receives, one pair per peer.
func (b *backend) AllToAll(out, in *memory.Tensor, _ time.Time) error {
	n := uintptr(in.Size()) / uintptr(b.size)
	ip, op := in.Region().Ptr, out.Region().Ptr
	return b.on(func() error {
		if err := b.n.GroupStart(); err != nil {
			return err
		}
		for p := range b.size {
			if err := b.c.Send(ip+uintptr(p)*n, int(n), Uint8, p, b.stream); err != nil {
				return err
			}
			if err := b.c.Recv(op+uintptr(p)*n, int(n), Uint8, p, b.stream); err != nil {
				return err
			}
		}
		return b.n.GroupEnd()
	})
}

func (b *backend) Send(t *memory.Tensor, peer int, _ time.Time) error {
	return b.on(func() error { return b.c.Send(t.Region().Ptr, int(t.Size()), Uint8, peer, b.stream) })
}

func (b *backend) Recv(t *memory.Tensor, peer int, _ time.Time) error {
	return b.on(func() error { return b.c.Recv(t.Region().Ptr, int(t.Size()), Uint8, peer, b.stream) })
}

// Barrier all-reduces one byte.
func (b *backend) Barrier(time.Time) error {
	return b.on(func() error { return b.c.AllReduce(b.one, b.one, 1, Uint8, Max, b.stream) })
}

// Shutdown aborts the communicator (running work ends with an error).
func (b *backend) Shutdown() { _ = b.on(b.c.Abort) }

// Release frees the barrier byte.
func (b *backend) Release() { _ = b.dev.Free(b.one) }
