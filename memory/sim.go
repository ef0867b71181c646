package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// ErrDeviceMemory is returned when the device has no memory left.
var ErrDeviceMemory = errors.New("device out of memory")

// SimDevice is a simulated device on host memory. Each stream is a
// goroutine that runs its queue in order; work takes its Duration (and
// waits for its Gate); an event completes when its stream reaches it.
// It checks every enqueued use of memory against the stream order
// (Violations). Close stops its goroutines.
type SimDevice struct {
	total int64

	mu       sync.Mutex
	used     int64 // allocated segments and mapped pages
	nextAddr uintptr
	segments map[uintptr][]byte // fixed segments by base address
	reserved map[uintptr][]byte // address ranges reserved with mmap
	pageSize map[uintptr]int64  // mapped ranges by address
	streams  []*simStream
	events   int
	hb       *checker
	closed   bool
	wg       sync.WaitGroup
}

type simStream struct {
	id    Stream
	clock vclock // the frontier: what the next op is ordered after
	pos   uint64 // ops enqueued so far
	queue chan simItem
}

// simItem is one entry of a stream's queue: work, an event record, or a
// wait for an event.
type simItem struct {
	op     *Op
	record *simRecord
	wait   *simRecord
}

// simRecord is one recording of an event: done closes when the stream
// reaches it; vc is the stream's clock there.
type simRecord struct {
	done chan struct{}
	vc   vclock
}

type simEvent struct {
	id  int
	dev *SimDevice
	rec *simRecord // nil: never recorded (complete)
}

func (e *simEvent) ID() int { return e.id }

// simQueueDepth bounds each stream's queue; Launch blocks when it is full,
// as a GPU's launch queue does.
const simQueueDepth = 1 << 14

// NewSimDevice returns a simulated device of total bytes with its default
// stream (0).
func NewSimDevice(total int64) *SimDevice {
	d := &SimDevice{total: total, nextAddr: 1 << 20, segments: map[uintptr][]byte{}, reserved: map[uintptr][]byte{},
		pageSize: map[uintptr]int64{}, hb: newChecker()}
	d.NewStream()
	return d
}

// TotalMemory implements Device.
func (d *SimDevice) TotalMemory() int64 { return d.total }

// FreeMemory implements Device.
func (d *SimDevice) FreeMemory() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total - d.used
}

// address hands out fresh address space, never reused: a new allocation
// never aliases an old one at the device level.
func (d *SimDevice) address(size int64) uintptr {
	p := d.nextAddr
	d.nextAddr += uintptr(size+4095) &^ 4095
	return p
}

// Malloc implements Device.
func (d *SimDevice) Malloc(size int64) (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if size <= 0 || d.used+size > d.total {
		return 0, fmt.Errorf("%w: %d bytes asked, %d of %d free", ErrDeviceMemory, size, d.total-d.used, d.total)
	}
	p := d.address(size)
	d.segments[p] = make([]byte, size)
	d.used += size
	return p, nil
}

// Free implements Device.
func (d *SimDevice) Free(ptr uintptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	seg, ok := d.segments[ptr]
	if !ok {
		return fmt.Errorf("free %#x: not a segment", ptr)
	}
	delete(d.segments, ptr)
	d.used -= int64(len(seg))
	return nil
}

// ReserveAddress implements Device: host address space reserved with
// mmap (no memory until pages are mapped), so that an expandable segment
// is contiguous host memory too.
func (d *SimDevice) ReserveAddress(size int64) (uintptr, error) {
	b, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return 0, fmt.Errorf("reserve %d bytes of address space: %w", size, err)
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reserved[p] = b
	return p, nil
}

// MapPages implements Device: the range becomes readable and writable
// host memory.
func (d *SimDevice) MapPages(ptr uintptr, size int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.used+size > d.total {
		return fmt.Errorf("%w: map %d bytes, %d of %d free", ErrDeviceMemory, size, d.total-d.used, d.total)
	}
	b := d.reservedRange(ptr, size)
	if b == nil {
		return fmt.Errorf("map %#x: not in a reserved range", ptr)
	}
	if err := syscall.Mprotect(b, syscall.PROT_READ|syscall.PROT_WRITE); err != nil {
		return fmt.Errorf("map %#x: %w", ptr, err)
	}
	d.pageSize[ptr] = size
	d.used += size
	return nil
}

// UnmapPages implements Device: ptr and size must be a range mapped
// before, or a run of such ranges; their memory goes back to the host.
func (d *SimDevice) UnmapPages(ptr uintptr, size int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for end := ptr + uintptr(size); ptr < end; {
		n, ok := d.pageSize[ptr]
		if !ok {
			return fmt.Errorf("unmap %#x: not mapped", ptr)
		}
		if b := d.reservedRange(ptr, n); b != nil {
			_ = syscall.Madvise(b, syscall.MADV_DONTNEED)
			_ = syscall.Mprotect(b, syscall.PROT_NONE)
		}
		delete(d.pageSize, ptr)
		d.used -= n
		ptr += uintptr(n)
	}
	return nil
}

// reservedRange is the host memory of [ptr, ptr+size) in a reservation.
func (d *SimDevice) reservedRange(ptr uintptr, size int64) []byte {
	for base, b := range d.reserved {
		if ptr >= base && ptr+uintptr(size) <= base+uintptr(len(b)) {
			off := ptr - base
			return b[off : off+uintptr(size) : off+uintptr(size)]
		}
	}
	return nil
}

// Bytes implements Device: the host memory of a region inside one
// segment or one reserved range (whose pages must be mapped).
func (d *SimDevice) Bytes(ptr uintptr, size int64) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	for base, b := range d.segments {
		if ptr >= base && ptr+uintptr(size) <= base+uintptr(len(b)) {
			off := ptr - base
			return b[off : off+uintptr(size) : off+uintptr(size)]
		}
	}
	return d.reservedRange(ptr, size)
}

// NewStream implements Device.
func (d *SimDevice) NewStream() Stream {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &simStream{id: Stream(len(d.streams)), queue: make(chan simItem, simQueueDepth)}
	d.streams = append(d.streams, s)
	d.wg.Add(1)
	go d.run(s)
	return s.id
}

// run executes a stream's queue in order until Close.
func (d *SimDevice) run(s *simStream) {
	defer d.wg.Done()
	for it := range s.queue {
		switch {
		case it.wait != nil:
			<-it.wait.done
		case it.record != nil:
			close(it.record.done)
		case it.op != nil:
			if it.op.Gate != nil {
				<-it.op.Gate
			}
			if it.op.Duration > 0 {
				time.Sleep(it.op.Duration)
			}
			if it.op.Run != nil {
				it.op.Run()
			}
		}
	}
}

func (d *SimDevice) stream(s Stream) *simStream {
	if int(s) < 0 || int(s) >= len(d.streams) {
		panic(fmt.Sprintf("memory: stream %d does not exist", s))
	}
	return d.streams[s]
}

// NewEvent implements Device.
func (d *SimDevice) NewEvent() Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events++
	return &simEvent{id: d.events, dev: d}
}

// Record implements Device.
func (d *SimDevice) Record(e Event, s Stream) {
	ev := e.(*simEvent)
	d.mu.Lock()
	st := d.stream(s)
	rec := &simRecord{done: make(chan struct{}), vc: st.clock.clone()}
	ev.rec = rec
	d.mu.Unlock()
	st.queue <- simItem{record: rec}
}

// Query implements Device; a completed event tells the host that the
// work before it is done.
func (d *SimDevice) Query(e Event) bool {
	ev := e.(*simEvent)
	d.mu.Lock()
	rec := ev.rec
	d.mu.Unlock()
	if rec == nil {
		return true
	}
	select {
	case <-rec.done:
		d.mu.Lock()
		d.hb.observe(rec.vc)
		d.mu.Unlock()
		return true
	default:
		return false
	}
}

// Synchronize implements Device.
func (d *SimDevice) Synchronize(ctx context.Context, e Event) error {
	ev := e.(*simEvent)
	d.mu.Lock()
	rec := ev.rec
	d.mu.Unlock()
	if rec == nil {
		return nil
	}
	select {
	case <-rec.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	d.mu.Lock()
	d.hb.observe(rec.vc)
	d.mu.Unlock()
	return nil
}

// StreamWait implements Device.
func (d *SimDevice) StreamWait(s Stream, e Event) {
	ev := e.(*simEvent)
	d.mu.Lock()
	rec := ev.rec
	if rec == nil {
		d.mu.Unlock()
		return
	}
	st := d.stream(s)
	st.clock = st.clock.merge(rec.vc)
	d.mu.Unlock()
	st.queue <- simItem{wait: rec}
}

// Launch implements Device: the op is checked against every earlier use
// of its memory, then queued.
func (d *SimDevice) Launch(s Stream, op Op) {
	d.mu.Lock()
	st := d.stream(s)
	st.clock = st.clock.merge(d.hb.host)
	st.pos++
	for len(st.clock) <= int(s) {
		st.clock = append(st.clock, 0)
	}
	st.clock[s] = st.pos
	d.hb.check(&op, s, st.clock)
	d.mu.Unlock()
	st.queue <- simItem{op: &op}
}

// Released tells the checker that an allocation was freed by its owner:
// later work on it is a use after free.
func (d *SimDevice) Released(gen uint64) {
	d.mu.Lock()
	d.hb.released(gen)
	d.mu.Unlock()
}

// Violations returns how many unprotected uses of memory were found, and
// the first ones described.
func (d *SimDevice) Violations() (int, []Violation) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hb.count, append([]Violation(nil), d.hb.found...)
}

// ViolationSummary describes the violations in words.
func (d *SimDevice) ViolationSummary() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hb.summary()
}

// EventsCreated is how many events were created.
func (d *SimDevice) EventsCreated() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.events
}

// SynchronizeDevice waits until every stream has run its queue so far.
func (d *SimDevice) SynchronizeDevice(ctx context.Context) error {
	d.mu.Lock()
	ids := make([]Stream, len(d.streams))
	for i := range d.streams {
		ids[i] = Stream(i)
	}
	d.mu.Unlock()
	for _, s := range ids {
		e := d.NewEvent()
		d.Record(e, s)
		if err := d.Synchronize(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the streams after their queued work. It is safe to call
// more than once.
func (d *SimDevice) Close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	for _, s := range d.streams {
		close(s.queue)
	}
	d.mu.Unlock()
	d.wg.Wait()
	d.mu.Lock()
	for p, b := range d.reserved {
		_ = syscall.Munmap(b)
		delete(d.reserved, p)
	}
	d.mu.Unlock()
}
