package memory

import (
	"context"
	"time"
)

// Stream identifies a device stream: work enqueued on one stream runs in
// order. Stream 0 is the device's default stream.
type Stream int

// Event marks a point in a stream's queue (record); it completes when the
// stream reaches it.
type Event interface {
	// ID names the event in messages.
	ID() int
}

// Region is a range of device memory that enqueued work uses, with the
// allocation it belongs to: Gen tells one allocation of the same bytes
// from the next.
type Region struct {
	Ptr  uintptr
	Size int64
	Gen  uint64
}

// Op is work enqueued on a stream: a copy, a kernel, a collective.
type Op struct {
	// Name describes the work in violation reports ("allreduce #3").
	Name string
	// Reads and Writes are the memory the work uses.
	Reads, Writes []Region
	// Run does the work when the stream reaches it (nil: nothing to
	// compute). It runs on the stream's goroutine.
	Run func()
	// Duration is how long the work takes once started.
	Duration time.Duration
	// Gate, if set, holds the work until it is closed (tests and benches
	// use it to keep a collective in flight).
	Gate <-chan struct{}
}

// Device is the runtime interface the caching allocator and the process
// groups use: streams, events, raw memory and enqueued work. The
// simulated device implements it on host memory; the CUDA and ACL
// runtimes implement it on a GPU or NPU.
type Device interface {
	// TotalMemory is the device's capacity in bytes.
	TotalMemory() int64
	// FreeMemory is what is not mapped or allocated yet.
	FreeMemory() int64
	// Malloc allocates a fixed segment (cudaMalloc); Free releases it.
	Malloc(size int64) (uintptr, error)
	Free(ptr uintptr) error
	// ReserveAddress reserves address space without memory; MapPages
	// backs [ptr, ptr+size) with memory; UnmapPages releases it
	// (expandable segments: cuMemAddressReserve, cuMemMap, cuMemUnmap).
	ReserveAddress(size int64) (uintptr, error)
	MapPages(ptr uintptr, size int64) error
	UnmapPages(ptr uintptr, size int64) error

	// NewStream creates a stream.
	NewStream() Stream
	// NewEvent creates an event; Record places it at the end of s's queue.
	NewEvent() Event
	Record(e Event, s Stream)
	// Query reports whether e has completed (a recorded event that its
	// stream reached, or one never recorded).
	Query(e Event) bool
	// Synchronize blocks the host until e completes or ctx ends.
	Synchronize(ctx context.Context, e Event) error
	// StreamWait makes later work on s wait until e completes.
	StreamWait(s Stream, e Event)
	// Launch enqueues op on s.
	Launch(s Stream, op Op)
	// Bytes returns the host-visible memory of a region inside one
	// allocation (nil on a device without host access).
	Bytes(ptr uintptr, size int64) []byte
}
