package memory

import "errors"

// expandableBlock allocates from the stream's growing segment of the
// pool: the lowest-address free range that fits, with its pages mapped on
// demand. When the device is full, the pages under free blocks are
// unmapped and the mapping retried once.
func (a *Allocator) expandableBlock(size int64, s Stream, small bool) (*block, error) {
	seg, err := a.expandSegment(s, small)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		var b *block
		for c := seg.head; c != nil; c = c.next {
			if _, cached := a.free[c]; cached && c.size >= size {
				b = c
				break
			}
		}
		if b == nil {
			return nil, a.oom(size, size) // the address range itself is full
		}
		err := a.mapRange(seg, b.ptr, size)
		if err == nil {
			delete(a.free, b)
			return b, nil
		}
		if !errors.Is(err, ErrDeviceMemory) {
			return nil, err
		}
		if attempt == 1 {
			return nil, a.oom(seg.pageSize, size)
		}
		a.releaseCached()
		a.stats.NumAllocRetries++
	}
}

// expandSegment returns the stream's segment of the pool, reserving its
// address range (the device's memory and an eighth more, as PyTorch does)
// the first time.
func (a *Allocator) expandSegment(s Stream, small bool) (*segment, error) {
	key := expandKey{s, small}
	if seg, ok := a.expand[key]; ok {
		return seg, nil
	}
	page := int64(largeBuffer)
	if small {
		page = smallBuffer
	}
	total := a.dev.TotalMemory()
	size := (total + total/8 + page - 1) / page * page
	ptr, err := a.dev.ReserveAddress(size)
	if err != nil {
		return nil, err
	}
	seg := &segment{ptr: ptr, size: size, stream: s, small: small, expandable: true, pageSize: page, mapped: make([]bool, size/page)}
	seg.head = &block{ptr: ptr, size: size, stream: s, small: small, seg: seg}
	a.free[seg.head] = struct{}{}
	a.expand[key] = seg
	a.stats.Segment.add(1)
	return seg, nil
}

// mapRange maps the pages under [ptr, ptr+size).
func (a *Allocator) mapRange(seg *segment, ptr uintptr, size int64) error {
	first := int64(ptr-seg.ptr) / seg.pageSize
	last := (int64(ptr-seg.ptr) + size - 1) / seg.pageSize
	for i := first; i <= last; i++ {
		if seg.mapped[i] {
			continue
		}
		if err := a.dev.MapPages(seg.ptr+uintptr(i*seg.pageSize), seg.pageSize); err != nil {
			return err
		}
		seg.mapped[i] = true
		a.stats.ReservedBytes.add(seg.pageSize)
		a.stats.NumDeviceAlloc++
	}
	return nil
}

// unmapFree unmaps every mapped page that no allocated block, nor a
// freed block still waiting for events, touches.
func (a *Allocator) unmapFree(seg *segment) {
	busy := make([]bool, len(seg.mapped))
	for b := seg.head; b != nil; b = b.next {
		if _, cached := a.free[b]; cached {
			continue
		}
		first := int64(b.ptr-seg.ptr) / seg.pageSize
		last := (int64(b.ptr-seg.ptr) + b.size - 1) / seg.pageSize
		for i := first; i <= last; i++ {
			busy[i] = true
		}
	}
	for i, m := range seg.mapped {
		if !m || busy[i] {
			continue
		}
		if err := a.dev.UnmapPages(seg.ptr+uintptr(int64(i)*seg.pageSize), seg.pageSize); err != nil {
			continue
		}
		seg.mapped[i] = false
		a.stats.ReservedBytes.add(-seg.pageSize)
		a.stats.NumDeviceFree++
	}
}
