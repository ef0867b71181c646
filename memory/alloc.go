package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// AllocatorConfig configures a caching allocator.
type AllocatorConfig struct {
	// ExpandableSegments grows one segment per stream and pool, mapped in
	// pages (2 MiB small, 20 MiB large), instead of fixed segments.
	ExpandableSegments bool
}

// Allocator is a caching allocator modelled on PyTorch's CUDA caching
// allocator (docs/sources.md): sizes rounded to 512 bytes; a small pool
// (requests up to 1 MiB, in 2 MiB segments) and a large pool (20 MiB
// segments below 10 MiB, else the size rounded to 2 MiB); blocks split and
// merged as PyTorch does; a freed block is reused only for requests on the
// stream it was allocated on; a block used on other streams (RecordStream)
// goes back to the pool only once events recorded on those streams at free
// time complete, found by the next Malloc; when the device is full the
// cache is freed and the allocation retried before an OOMError. It is safe
// for concurrent use.
type Allocator struct {
	dev Device
	cfg AllocatorConfig

	mu      sync.Mutex
	free    map[*block]struct{}       // cached free blocks, both pools
	events  map[Stream][]*streamEvent // per stream, in record order
	expand  map[expandKey]*segment
	fixed   map[*segment]struct{}
	nextGen uint64
	stats   Stats
}

// block is a piece of a segment.
type block struct {
	ptr       uintptr
	size      int64
	requested int64
	stream    Stream // the stream it was allocated on
	small     bool
	seg       *segment
	prev      *block
	next      *block
	allocated bool
	// dead marks a block absorbed into a neighbour by a merge.
	dead bool
	// gen numbers the block's current (or last) allocation.
	gen uint64
	// uses counts, per other stream, the recorded uses of the allocation
	// (a count, not a set: a use waited for and erased must not cancel
	// another use on the same stream still in flight).
	uses map[Stream]int
	// pending are the events recorded at free time, per stream, with the
	// uses not yet erased.
	pending map[Stream]*streamEvent
}

// streamEvent is an event recorded on a stream when a block used there
// was freed.
type streamEvent struct {
	ev      Event
	b       *block
	stream  Stream
	uses    int
	dropped bool
}

// segment is memory obtained from the device: a fixed segment, or the
// address range of an expandable one.
type segment struct {
	ptr        uintptr
	size       int64
	stream     Stream
	small      bool
	expandable bool
	pageSize   int64
	mapped     []bool // per page, expandable only
	head       *block
}

type expandKey struct {
	stream Stream
	small  bool
}

// NewAllocator returns a caching allocator on dev.
func NewAllocator(dev Device, cfg AllocatorConfig) *Allocator {
	return &Allocator{dev: dev, cfg: cfg, free: map[*block]struct{}{}, events: map[Stream][]*streamEvent{},
		expand: map[expandKey]*segment{}, fixed: map[*segment]struct{}{}}
}

// Device is the allocator's device.
func (a *Allocator) Device() Device { return a.dev }

// Stats returns a copy of the statistics.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// malloc allocates size bytes for use on stream s.
func (a *Allocator) malloc(size int64, s Stream) (*block, error) {
	if size < 0 {
		return nil, fmt.Errorf("memory: allocate %d bytes: want 0 or more", size)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.processEvents()
	rounded := roundSize(size)
	small := isSmall(rounded)
	var b *block
	var err error
	if a.cfg.ExpandableSegments {
		b, err = a.expandableBlock(rounded, s, small)
	} else {
		b, err = a.fixedBlock(rounded, s, small)
	}
	if err != nil {
		return nil, err
	}
	a.allocFound(b, rounded, size)
	return b, nil
}

// fixedBlock finds a cached block or allocates a segment, freeing the
// cache and retrying once before giving up.
func (a *Allocator) fixedBlock(size int64, s Stream, small bool) (*block, error) {
	if b := a.bestFit(size, s, small); b != nil {
		return b, nil
	}
	segSize := segmentSize(size)
	b, err := a.newSegment(segSize, s, small)
	if errors.Is(err, ErrDeviceMemory) {
		a.releaseCached()
		a.stats.NumAllocRetries++
		b, err = a.newSegment(segSize, s, small)
	}
	if errors.Is(err, ErrDeviceMemory) {
		return nil, a.oom(segSize, size)
	}
	return b, err
}

// bestFit is the smallest cached block of the pool on stream s that fits
// (lowest address among equals).
func (a *Allocator) bestFit(size int64, s Stream, small bool) *block {
	var best *block
	for b := range a.free {
		if b.stream != s || b.small != small || b.size < size {
			continue
		}
		if best == nil || b.size < best.size || (b.size == best.size && b.ptr < best.ptr) {
			best = b
		}
	}
	if best != nil {
		delete(a.free, best)
	}
	return best
}

// newSegment gets a fixed segment from the device: one block.
func (a *Allocator) newSegment(size int64, s Stream, small bool) (*block, error) {
	ptr, err := a.dev.Malloc(size)
	if err != nil {
		return nil, err
	}
	seg := &segment{ptr: ptr, size: size, stream: s, small: small}
	b := &block{ptr: ptr, size: size, stream: s, small: small, seg: seg}
	seg.head = b
	a.fixed[seg] = struct{}{}
	a.stats.NumDeviceAlloc++
	a.stats.ReservedBytes.add(size)
	a.stats.Segment.add(1)
	return b, nil
}

// allocFound hands b out for a request of size (rounded) bytes, splitting
// the rest off when PyTorch would.
func (a *Allocator) allocFound(b *block, size, requested int64) {
	remaining := b.size - size
	split := remaining >= minBlockSize && (b.small || b.seg.expandable || remaining > smallSize)
	if split {
		rest := &block{ptr: b.ptr + uintptr(size), size: remaining, stream: b.stream, small: b.small, seg: b.seg, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = rest
		}
		b.next = rest
		b.size = size
		a.free[rest] = struct{}{}
	}
	a.nextGen++
	b.gen, b.allocated, b.requested = a.nextGen, true, requested
	b.uses = nil
	a.stats.AllocatedBytes.add(b.size)
	a.stats.ActiveBytes.add(b.size)
	a.stats.RequestedBytes.add(requested)
	a.stats.Allocation.add(1)
}

// release is the owner's free: the block goes back to the pool now, or
// once the events of the streams that used it complete.
func (a *Allocator) release(b *block) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !b.allocated {
		panic("memory: block freed twice")
	}
	b.allocated = false
	a.stats.AllocatedBytes.add(-b.size)
	a.stats.RequestedBytes.add(-b.requested)
	a.stats.Allocation.add(-1)
	if sim, ok := a.dev.(*SimDevice); ok {
		sim.Released(b.gen)
	}
	for s, n := range b.uses {
		if n <= 0 {
			continue
		}
		ev := a.dev.NewEvent()
		a.dev.Record(ev, s)
		a.stats.EventsCreated++
		se := &streamEvent{ev: ev, b: b, stream: s, uses: n}
		if b.pending == nil {
			b.pending = map[Stream]*streamEvent{}
		}
		b.pending[s] = se
		a.events[s] = append(a.events[s], se)
	}
	b.uses = nil
	if len(b.pending) == 0 {
		a.freeBlock(b)
	}
}

// freeBlock returns a block with no pending use to its pool, merged with
// free neighbours.
func (a *Allocator) freeBlock(b *block) {
	a.stats.ActiveBytes.add(-b.size)
	for _, n := range []*block{b.prev, b.next} {
		if n == nil || n.allocated || len(n.pending) > 0 {
			continue
		}
		if _, cached := a.free[n]; !cached {
			continue
		}
		delete(a.free, n)
		if n == b.prev {
			b.ptr, b.prev = n.ptr, n.prev
			if n.prev != nil {
				n.prev.next = b
			} else {
				b.seg.head = b
			}
		} else {
			b.next = n.next
			if n.next != nil {
				n.next.prev = b
			}
		}
		b.size += n.size
		n.dead = true
	}
	a.free[b] = struct{}{}
}

// processEvents returns blocks whose events completed, in each stream's
// record order, stopping at a stream's first incomplete event.
func (a *Allocator) processEvents() {
	for s, q := range a.events {
		i := 0
		for ; i < len(q); i++ {
			se := q[i]
			if !se.dropped {
				a.stats.EventsQueried++
				if !a.dev.Query(se.ev) {
					break
				}
				a.eventDone(se)
			}
		}
		clear(q[:i])
		if a.events[s] = q[i:]; len(a.events[s]) == 0 {
			delete(a.events, s)
		}
	}
}

// eventDone retires a block's event; the last one frees the block.
func (a *Allocator) eventDone(se *streamEvent) {
	b := se.b
	delete(b.pending, se.stream)
	se.dropped = true
	if len(b.pending) == 0 && !b.allocated {
		a.freeBlock(b)
	}
}

// releaseCached waits for every pending event, then gives the device back
// every cached segment that is wholly free (fixed) or every page under
// free blocks (expandable).
func (a *Allocator) releaseCached() {
	for _, q := range a.events {
		for _, se := range q {
			if !se.dropped {
				_ = a.dev.Synchronize(context.Background(), se.ev)
			}
		}
	}
	a.processEvents()
	for seg := range a.fixed {
		b := seg.head
		if b.next != nil || b.allocated || len(b.pending) > 0 {
			continue
		}
		if err := a.dev.Free(seg.ptr); err != nil {
			continue
		}
		delete(a.free, b)
		delete(a.fixed, seg)
		a.stats.NumDeviceFree++
		a.stats.ReservedBytes.add(-seg.size)
		a.stats.Segment.add(-1)
	}
	for _, seg := range a.expand {
		a.unmapFree(seg)
	}
}

// EmptyCache gives the device back the memory the allocator holds but
// does not use (torch.cuda.empty_cache).
func (a *Allocator) EmptyCache() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.releaseCached()
}

func (a *Allocator) oom(tried, request int64) error {
	a.stats.NumOOMs++
	return &OOMError{Tried: tried, Request: request, Capacity: a.dev.TotalMemory(), Free: a.dev.FreeMemory(),
		Allocated: a.stats.AllocatedBytes.Current, Reserved: a.stats.ReservedBytes.Current}
}
