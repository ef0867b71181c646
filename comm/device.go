package comm

import (
	"context"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// DeviceComm is one rank's communicator of a vendor library (NCCL, HCCL)
// bound to a group's device stream: each call enqueues on that stream and
// returns. Addresses are device memory; counts are elements of the
// vendor's type code dt, op the vendor's reduction code (see
// VendorCodes); sizes are bytes.
type DeviceComm interface {
	AllReduce(send, recv uintptr, count, dt, op int) error
	AllGather(send, recv uintptr, bytesPerRank int) error
	ReduceScatter(send, recv uintptr, countPerRank, dt, op int) error
	Broadcast(buf uintptr, bytes, root int) error
	AllToAll(send, recv uintptr, bytesPerRank int) error
	Send(buf uintptr, bytes, peer int) error
	Recv(buf uintptr, bytes, peer int) error
	Barrier() error
	// AsyncError is the communicator's asynchronous error, if any
	// (asked by the watchdog).
	AsyncError() error
	// Abort ends the communicator at once; running work fails.
	Abort() error
	// Free releases what the communicator holds besides itself (device
	// memory), once its stream is idle and after Abort.
	Free() error
}

// VendorCodes are a vendor library's codes for comm's element types and
// reductions; a missing one is refused with an error naming Library.
type VendorCodes struct {
	Library string
	DTypes  map[DType]int
	Ops     map[ReduceOp]int
	// OpsHint, when set, follows the error for a missing reduction.
	OpsHint string
}

func (v VendorCodes) lookup(d DType, op ReduceOp) (int, int, error) {
	o, ok := v.Ops[op]
	if !ok {
		return 0, 0, fmt.Errorf("%s: %s is not one of its reductions%s", v.Library, op, v.OpsHint)
	}
	t, ok := v.DTypes[d]
	if !ok {
		return 0, 0, fmt.Errorf("%s: %s is not one of its element types", v.Library, d)
	}
	return t, o, nil
}

// ExchangeRootID gives every rank the bytes that rank 0 makes with
// newID (NCCL's unique id, HCCL's root info): rank 0 publishes them under
// key in st, the others read them. Each must be size bytes.
func ExchangeRootID(ctx context.Context, st Store, key string, rank, size int, newID func() ([]byte, error)) ([]byte, error) {
	if rank == 0 {
		id, err := newID()
		if err != nil {
			return nil, err
		}
		if err := st.Set(ctx, key, hex.EncodeToString(id)); err != nil {
			return nil, err
		}
		return id, nil
	}
	v, err := st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	id, err := hex.DecodeString(v)
	if err != nil || len(id) != size {
		return nil, fmt.Errorf("comm: the value of %s in the store is not %d bytes of hex", key, size)
	}
	return id, nil
}

// NewDeviceGroup makes a group over a vendor library on dev: bind gets
// the group's stream (the vendor's handle) and returns the communicator
// bound to it; codes translate element types and reductions. Every call
// runs on a thread with dev's device set. opt.Device is set to dev.
func NewDeviceGroup(rank, size int, dev *memory.RuntimeDevice, codes VendorCodes, bind func(stream uintptr) (DeviceComm, error), opt Options) (*Group, error) {
	opt.Device = dev
	return NewGroupOn(rank, size, func(s memory.Stream) (Backend, error) {
		var c DeviceComm
		if err := dev.Do(func() (err error) { c, err = bind(dev.Handle(s)); return err }); err != nil {
			return nil, err
		}
		b := &deviceBackend{c: c, dev: dev, size: size, codes: codes}
		if opt.Watchdog != nil {
			opt.Watchdog.OnCheck(b.asyncError)
		}
		return b, nil
	}, opt)
}

// deviceBackend is Backend on a DeviceComm; the deadline is the
// watchdog's business, since the calls only enqueue.
type deviceBackend struct {
	c     DeviceComm
	dev   *memory.RuntimeDevice
	size  int
	codes VendorCodes
	// mu orders the watchdog's queries against the abort, after which
	// the communicator is gone.
	mu      sync.Mutex
	aborted bool
}

func (b *deviceBackend) AllReduce(t *memory.Tensor, d DType, op ReduceOp, _ time.Time) error {
	dt, o, err := b.codes.lookup(d, op)
	if err != nil {
		return err
	}
	p := t.Region().Ptr
	return b.dev.Do(func() error { return b.c.AllReduce(p, p, int(t.Size())/d.Size(), dt, o) })
}

func (b *deviceBackend) AllGather(out, in *memory.Tensor, _ time.Time) error {
	return b.dev.Do(func() error { return b.c.AllGather(in.Region().Ptr, out.Region().Ptr, int(in.Size())) })
}

func (b *deviceBackend) ReduceScatter(out, in *memory.Tensor, d DType, op ReduceOp, _ time.Time) error {
	dt, o, err := b.codes.lookup(d, op)
	if err != nil {
		return err
	}
	return b.dev.Do(func() error {
		return b.c.ReduceScatter(in.Region().Ptr, out.Region().Ptr, int(out.Size())/d.Size(), dt, o)
	})
}

func (b *deviceBackend) Broadcast(t *memory.Tensor, root int, _ time.Time) error {
	return b.dev.Do(func() error { return b.c.Broadcast(t.Region().Ptr, int(t.Size()), root) })
}

func (b *deviceBackend) AllToAll(out, in *memory.Tensor, _ time.Time) error {
	return b.dev.Do(func() error { return b.c.AllToAll(in.Region().Ptr, out.Region().Ptr, int(in.Size())/b.size) })
}

func (b *deviceBackend) Send(t *memory.Tensor, peer int, _ time.Time) error {
	return b.dev.Do(func() error { return b.c.Send(t.Region().Ptr, int(t.Size()), peer) })
}

func (b *deviceBackend) Recv(t *memory.Tensor, peer int, _ time.Time) error {
	return b.dev.Do(func() error { return b.c.Recv(t.Region().Ptr, int(t.Size()), peer) })
}

func (b *deviceBackend) Barrier(time.Time) error { return b.dev.Do(b.c.Barrier) }

// asyncError asks the communicator, unless it was aborted.
func (b *deviceBackend) asyncError() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.aborted {
		return nil
	}
	return b.dev.Do(b.c.AsyncError)
}

// Shutdown aborts the communicator (once).
func (b *deviceBackend) Shutdown() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.aborted {
		b.aborted = true
		_ = b.dev.Do(b.c.Abort)
	}
}

// Release frees the communicator's device memory.
func (b *deviceBackend) Release() { _ = b.dev.Do(b.c.Free) }
