package memory

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
)

// Runtime is a vendor runtime's primitive calls (the CUDA runtime, ACL),
// each on the calling thread's current device. Handles and device
// addresses are integers.
type Runtime interface {
	SetDevice(index int) error
	CreateStream() (uintptr, error)
	CreateEvent() (uintptr, error)
	RecordEvent(event, stream uintptr) error
	EventDone(event uintptr) (bool, error)
	StreamWaitEvent(stream, event uintptr) error
	Malloc(size int64) (uintptr, error)
	Free(ptr uintptr) error
	SynchronizeStream(stream uintptr) error
	MemInfo() (free, total int64, err error)
}

// RuntimeDevice is one device of a vendor runtime as a Device. The
// current device is per OS thread, so every call locks its goroutine's
// thread and sets the device first. Host work (Launch) runs once the
// stream has drained; device work (collectives) is enqueued by the
// vendor's library on Handle(s). Expandable segments need the vendor's
// virtual-memory calls, which RuntimeDevice does not have.
type RuntimeDevice struct {
	rt    Runtime
	index int

	mu      sync.Mutex
	streams []uintptr
	events  int
}

// NewRuntimeDevice opens device index of rt; Stream 0 is a stream made
// for it.
func NewRuntimeDevice(rt Runtime, index int) (*RuntimeDevice, error) {
	d := &RuntimeDevice{rt: rt, index: index}
	var s uintptr
	if err := d.do(func() (err error) { s, err = rt.CreateStream(); return err }); err != nil {
		return nil, err
	}
	d.streams = []uintptr{s}
	return d, nil
}

func (d *RuntimeDevice) do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.rt.SetDevice(d.index); err != nil {
		return err
	}
	return fn()
}

// Handle is the vendor stream of s.
func (d *RuntimeDevice) Handle(s Stream) uintptr {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.streams[s]
}

func (d *RuntimeDevice) memInfo() (free, total int64) {
	_ = d.do(func() (err error) { free, total, err = d.rt.MemInfo(); return err })
	return
}

// TotalMemory implements Device.
func (d *RuntimeDevice) TotalMemory() int64 { _, t := d.memInfo(); return t }

// FreeMemory implements Device.
func (d *RuntimeDevice) FreeMemory() int64 { f, _ := d.memInfo(); return f }

// Malloc implements Device.
func (d *RuntimeDevice) Malloc(size int64) (uintptr, error) {
	var p uintptr
	if err := d.do(func() (err error) { p, err = d.rt.Malloc(size); return err }); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrDeviceMemory, err)
	}
	return p, nil
}

// Free implements Device.
func (d *RuntimeDevice) Free(p uintptr) error { return d.do(func() error { return d.rt.Free(p) }) }

var errNoVMM = errors.New("expandable segments need the vendor runtime's virtual-memory calls, which gorun does not load yet: use fixed segments")

// ReserveAddress implements Device.
func (d *RuntimeDevice) ReserveAddress(int64) (uintptr, error) { return 0, errNoVMM }

// MapPages implements Device.
func (d *RuntimeDevice) MapPages(uintptr, int64) error { return errNoVMM }

// UnmapPages implements Device.
func (d *RuntimeDevice) UnmapPages(uintptr, int64) error { return errNoVMM }

// NewStream implements Device.
func (d *RuntimeDevice) NewStream() Stream {
	var s uintptr
	if err := d.do(func() (err error) { s, err = d.rt.CreateStream(); return err }); err != nil {
		panic(err) // Device has no error here: a device that cannot make a stream is unusable
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.streams = append(d.streams, s)
	return Stream(len(d.streams) - 1)
}

type runtimeEvent struct {
	id int
	h  uintptr
}

func (e *runtimeEvent) ID() int { return e.id }

// NewEvent implements Device.
func (d *RuntimeDevice) NewEvent() Event {
	var h uintptr
	if err := d.do(func() (err error) { h, err = d.rt.CreateEvent(); return err }); err != nil {
		panic(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events++
	return &runtimeEvent{id: d.events, h: h}
}

// Record implements Device.
func (d *RuntimeDevice) Record(e Event, s Stream) {
	st := d.Handle(s)
	_ = d.do(func() error { return d.rt.RecordEvent(e.(*runtimeEvent).h, st) })
}

// Query implements Device.
func (d *RuntimeDevice) Query(e Event) bool {
	var done bool
	err := d.do(func() (err error) { done, err = d.rt.EventDone(e.(*runtimeEvent).h); return err })
	return err == nil && done
}

// Synchronize implements Device by polling, so that ctx can end it.
func (d *RuntimeDevice) Synchronize(ctx context.Context, e Event) error {
	for delay := 10 * time.Microsecond; !d.Query(e); delay = min(2*delay, time.Millisecond) {
		if err := ctxtime.Sleep(ctx, delay); err != nil {
			return err
		}
	}
	return nil
}

// StreamWait implements Device.
func (d *RuntimeDevice) StreamWait(s Stream, e Event) {
	st := d.Handle(s)
	_ = d.do(func() error { return d.rt.StreamWaitEvent(st, e.(*runtimeEvent).h) })
}

// Launch implements Device: host work, after the stream drained.
func (d *RuntimeDevice) Launch(s Stream, op Op) {
	st := d.Handle(s)
	_ = d.do(func() error { return d.rt.SynchronizeStream(st) })
	if op.Gate != nil {
		<-op.Gate
	}
	if op.Run != nil {
		op.Run()
	}
}

// Bytes implements Device: device memory is not host memory.
func (d *RuntimeDevice) Bytes(uintptr, int64) []byte { return nil }

// Do runs fn with the device set on a locked thread (for vendor calls
// such as copies and communicator set-up).
func (d *RuntimeDevice) Do(fn func() error) error { return d.do(fn) }
