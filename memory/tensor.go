package memory

import (
	"fmt"
	"sync/atomic"
)

// Storage is an allocation owned by reference count. Go's garbage
// collector cannot know when the device may reuse memory, so a strong
// reference here is explicit: each *Tensor handle holds one until its
// Release, and the block goes back to the allocator when the last is
// released. A weak reference (WeakRef) holds none and can only ask
// whether the storage is still alive.
type Storage struct {
	alloc  *Allocator
	b      *block
	gen    uint64
	ptr    uintptr
	size   int64
	stream Stream
	refs   atomic.Int64
}

// Tensor is one strong reference to (a range of) a storage.
type Tensor struct {
	st       *Storage
	off      int64
	size     int64
	released atomic.Bool
}

// Empty allocates size bytes for use on stream s and returns the first
// reference to them.
func (a *Allocator) Empty(size int64, s Stream) (*Tensor, error) {
	b, err := a.malloc(size, s)
	if err != nil {
		return nil, err
	}
	st := &Storage{alloc: a, b: b, gen: b.gen, ptr: b.ptr, size: size, stream: s}
	st.refs.Store(1)
	return &Tensor{st: st, size: size}, nil
}

// Retain returns a new strong reference to the same storage and range.
func (t *Tensor) Retain() *Tensor {
	if t.released.Load() {
		panic("memory: Retain of a released tensor")
	}
	t.st.refs.Add(1)
	return &Tensor{st: t.st, off: t.off, size: t.size}
}

// View returns a new strong reference to [off, off+size) of t.
func (t *Tensor) View(off, size int64) (*Tensor, error) {
	if off < 0 || size < 0 || off+size > t.size {
		return nil, fmt.Errorf("memory: view [%d, +%d) of a %d-byte tensor", off, size, t.size)
	}
	v := t.Retain()
	v.off, v.size = t.off+off, size
	return v, nil
}

// Release drops this reference; the last one frees the storage. A second
// Release of the same handle does nothing.
func (t *Tensor) Release() {
	if t.released.Swap(true) {
		return
	}
	if t.st.refs.Add(-1) == 0 {
		t.st.alloc.release(t.st.b)
	}
}

// Size is the tensor's size in bytes.
func (t *Tensor) Size() int64 { return t.size }

// Stream is the stream its storage was allocated on.
func (t *Tensor) Stream() Stream { return t.st.stream }

// Storage is the tensor's storage.
func (t *Tensor) Storage() *Storage { return t.st }

// Region is the device memory the tensor covers, for an Op.
func (t *Tensor) Region() Region {
	return Region{Ptr: t.st.ptr + uintptr(t.off), Size: t.size, Gen: t.st.gen}
}

// Bytes is the tensor's memory as host bytes (nil where the device has
// no host view).
func (t *Tensor) Bytes() []byte { return t.st.alloc.dev.Bytes(t.st.ptr+uintptr(t.off), t.size) }

// Alive reports whether any strong reference remains.
func (s *Storage) Alive() bool { return s.refs.Load() > 0 }

// RecordStream marks the storage as used by work on stream s: if it is
// freed before that work is known to be done, its block waits for an
// event on s (recordStream).
func (s *Storage) RecordStream(st Stream) { s.alloc.recordStream(s.b, s.gen, st) }

func (a *Allocator) recordStream(b *block, gen uint64, s Stream) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s == b.stream || !b.allocated || b.gen != gen {
		return
	}
	if b.uses == nil {
		b.uses = map[Stream]int{}
	}
	b.uses[s]++
}

// eraseStream drops one use of allocation gen of b on stream s, recorded
// by RecordStream, once the waiting stream is ordered after that use.
// Only the allocation stream may wait for it: a block is reused on that
// stream alone. A live allocation loses the mark; a freed one waiting for
// events loses its event on s when no use there remains, and goes back to
// the pool if none is left (torch_npu's eraseStream, with a count per
// stream instead of a set, and the allocation's generation guarding a
// block that was merged or reused since). It reports whether it erased.
func (a *Allocator) eraseStream(b *block, gen uint64, s, waiting Stream) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.dead || b.gen != gen || waiting != b.stream {
		return false
	}
	if b.allocated {
		if b.uses[s] <= 0 {
			return false
		}
		if b.uses[s]--; b.uses[s] == 0 {
			delete(b.uses, s)
		}
		return true
	}
	se := b.pending[s]
	if se == nil {
		return false
	}
	if se.uses--; se.uses > 0 {
		return true
	}
	a.eventDone(se)
	return true
}
