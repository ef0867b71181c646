package memory

import (
	"context"
	"errors"
	"strings"
	"testing"
)

const (
	kib = int64(1 << 10)
	mib = int64(1 << 20)
)

func mustEmpty(t *testing.T, a *Allocator, size int64, s Stream) *Tensor {
	t.Helper()
	x, err := a.Empty(size, s)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestSizesAndPools(t *testing.T) {
	tests := []struct {
		size, rounded, segment int64
	}{
		{1, 512, 2 * mib}, {1000, 1024, 2 * mib}, {mib, mib, 2 * mib}, {mib + 1, mib + 512, 20 * mib},
		{10*mib - 512, 10*mib - 512, 20 * mib}, {10*mib - 1, 10 * mib, 10 * mib}, {10 * mib, 10 * mib, 10 * mib}, {11*mib + 1, 11*mib + 512, 12 * mib},
	}
	for _, tt := range tests {
		if r := roundSize(tt.size); r != tt.rounded {
			t.Errorf("roundSize(%d) = %d; want %d", tt.size, r, tt.rounded)
		}
		if s := segmentSize(roundSize(tt.size)); s != tt.segment {
			t.Errorf("segmentSize(%d) = %d; want %d", tt.size, s, tt.segment)
		}
	}
}

// Statistics against hand-computed values.
func TestAllocatorStatistics(t *testing.T) {
	d := newSim(t, 256*mib)
	a := NewAllocator(d, AllocatorConfig{})
	x := mustEmpty(t, a, 1000, 0)   // small: 1024 of a new 2 MiB segment
	y := mustEmpty(t, a, 3*mib, 0)  // large: 3 MiB of a new 20 MiB segment, split
	z := mustEmpty(t, a, 12*mib, 0) // large: best fit is the 17 MiB rest of y's segment, split again
	if z.Region().Ptr != y.Region().Ptr+uintptr(3*mib) {
		t.Errorf("z at %#x; want right after y, in the rest of its segment", z.Region().Ptr)
	}
	st := a.Stats()
	want := map[string]int64{
		"allocated_bytes.all.current": 1024 + 3*mib + 12*mib, "reserved_bytes.all.current": 2*mib + 20*mib,
		"requested_bytes.all.current": 1000 + 3*mib + 12*mib, "segment.all.current": 2, "allocation.all.current": 3,
		"num_device_alloc": 2,
	}
	for k, v := range want {
		if got := st.Map()[k]; got != v {
			t.Errorf("%s = %d; want %d", k, got, v)
		}
	}
	// Reuse on the same stream: the same block back; nothing reserved.
	p := y.Region().Ptr
	y.Release()
	y2 := mustEmpty(t, a, 2*mib+100, 0)
	if y2.Region().Ptr != p {
		t.Errorf("reallocation at %#x; want the cached block at %#x", y2.Region().Ptr, p)
	}
	// On another stream: not that block.
	y2.Release()
	other := mustEmpty(t, a, 2*mib+100, 5)
	if other.Region().Ptr == p {
		t.Error("a block cached for stream 0 was handed to stream 5")
	}
	st = a.Stats()
	if st.ReservedBytes.Current != 2*mib+20*mib+20*mib || st.AllocatedBytes.Peak != 1024+3*mib+12*mib {
		t.Errorf("reserved %d (want %d), allocated peak %d (want %d)", st.ReservedBytes.Current, 2*mib+20*mib+20*mib, st.AllocatedBytes.Peak, 1024+3*mib+12*mib)
	}
	x.Release()
	z.Release()
	other.Release()
	if st := a.Stats(); st.AllocatedBytes.Current != 0 || st.ActiveBytes.Current != 0 {
		t.Errorf("after every release: allocated %d, active %d", st.AllocatedBytes.Current, st.ActiveBytes.Current)
	}
	a.EmptyCache()
	if st := a.Stats(); st.ReservedBytes.Current != 0 || st.NumDeviceFree != 3 || d.FreeMemory() != 256*mib {
		t.Errorf("after EmptyCache: reserved %d, frees %d, device free %d", st.ReservedBytes.Current, st.NumDeviceFree, d.FreeMemory())
	}
}

func TestFreedNeighboursMerge(t *testing.T) {
	d := newSim(t, 64*mib)
	a := NewAllocator(d, AllocatorConfig{})
	x, y, z := mustEmpty(t, a, 4*kib, 0), mustEmpty(t, a, 4*kib, 0), mustEmpty(t, a, 4*kib, 0)
	y.Release()
	x.Release()
	both := mustEmpty(t, a, 8*kib, 0)
	if both.Region().Ptr != x.Region().Ptr {
		t.Errorf("8 KiB at %#x; want the merged blocks at %#x", both.Region().Ptr, x.Region().Ptr)
	}
	z.Release()
	both.Release()
}

// A block used on another stream waits for that stream's event.
func TestRecordStreamHoldsBlockUntilEvent(t *testing.T) {
	d := newSim(t, 64*mib)
	a := NewAllocator(d, AllocatorConfig{})
	comm := d.NewStream()
	x := mustEmpty(t, a, mib, 0)
	gate := make(chan struct{})
	d.Launch(comm, Op{Name: "allreduce", Reads: []Region{x.Region()}, Gate: gate})
	x.Storage().RecordStream(comm)
	p := x.Region().Ptr
	x.Release()
	st := a.Stats()
	if st.AllocatedBytes.Current != 0 || st.ActiveBytes.Current != mib || st.EventsCreated != 1 {
		t.Fatalf("after free: allocated %d, active %d, events %d", st.AllocatedBytes.Current, st.ActiveBytes.Current, st.EventsCreated)
	}
	y := mustEmpty(t, a, mib, 0)
	if y.Region().Ptr == p {
		t.Fatal("block reused while the collective may still read it")
	}
	close(gate)
	if err := d.SynchronizeDevice(context.Background()); err != nil {
		t.Fatal(err)
	}
	z := mustEmpty(t, a, mib, 0) // this malloc processes the event
	if z.Region().Ptr != p {
		t.Errorf("after the event: %#x; want the block back at %#x", z.Region().Ptr, p)
	}
	d.Launch(0, Op{Name: "reuse", Writes: []Region{z.Region()}})
	if n, _ := d.Violations(); n != 0 {
		t.Error(d.ViolationSummary())
	}
	y.Release()
	z.Release()
}

func TestOutOfMemory(t *testing.T) {
	d := newSim(t, 64*mib)
	a := NewAllocator(d, AllocatorConfig{})
	x := mustEmpty(t, a, 40*mib, 0)
	_, err := a.Empty(30*mib, 0)
	var oom *OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("err %v; want an OOMError", err)
	}
	if oom.Tried != 30*mib || oom.Capacity != 64*mib || oom.Free != 24*mib || oom.Allocated != 40*mib || oom.Reserved != 40*mib {
		t.Errorf("OOM %+v", oom)
	}
	for _, s := range []string{"tried to allocate 30.00 MiB", "total capacity of 64.00 MiB", "24.00 MiB is free", "40.00 MiB is allocated"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("message %q lacks %q", err, s)
		}
	}
	if st := a.Stats(); st.NumOOMs != 1 || st.NumAllocRetries != 1 {
		t.Errorf("ooms %d, retries %d", st.NumOOMs, st.NumAllocRetries)
	}
	// The cache is freed before giving up: a cached 40 MiB segment makes
	// room for 50 MiB.
	x.Release()
	y, err := a.Empty(50*mib, 0)
	if err != nil {
		t.Fatalf("after freeing the cache: %v", err)
	}
	if st := a.Stats(); st.NumAllocRetries != 2 || st.NumDeviceFree != 1 {
		t.Errorf("retries %d, device frees %d", st.NumAllocRetries, st.NumDeviceFree)
	}
	y.Release()
}

func TestExpandableSegmentsMapPages(t *testing.T) {
	d := newSim(t, 256*mib)
	a := NewAllocator(d, AllocatorConfig{ExpandableSegments: true})
	x := mustEmpty(t, a, 3*mib, 0) // large pool: one 20 MiB page
	y := mustEmpty(t, a, 30*mib, 0)
	if st := a.Stats(); st.ReservedBytes.Current != 40*mib || st.Segment.Current != 1 {
		t.Errorf("reserved %d (want 40 MiB: two 20 MiB pages), segments %d", st.ReservedBytes.Current, st.Segment.Current)
	}
	if y.Region().Ptr != x.Region().Ptr+uintptr(3*mib) {
		t.Errorf("the second block does not follow the first in the growing segment")
	}
	s := mustEmpty(t, a, kib, 0) // small pool: its own segment, 2 MiB pages
	if st := a.Stats(); st.ReservedBytes.Current != 42*mib {
		t.Errorf("reserved %d; want 42 MiB", st.ReservedBytes.Current)
	}
	x.Release()
	y.Release()
	s.Release()
	a.EmptyCache()
	if st := a.Stats(); st.ReservedBytes.Current != 0 || d.FreeMemory() != 256*mib {
		t.Errorf("after EmptyCache: reserved %d, device free %d", st.ReservedBytes.Current, d.FreeMemory())
	}
}
