package comm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun-dev/gorun/memory"
	"github.com/gorun-dev/gorun/watchdog"
)

// DefaultTimeout bounds one collective, as ProcessGroupNCCL's default.
const DefaultTimeout = 10 * time.Minute

// Options configure a process group.
type Options struct {
	// Device, Allocator and Engine hold the tensors; the group adds its
	// communication stream to Device.
	Device    memory.Device
	Allocator *memory.Allocator
	Engine    *memory.Engine
	// Compute is the stream the caller works on (default 0): the group's
	// stream waits for it before each collective, and Wait orders it
	// after the collective.
	Compute memory.Stream
	// Timeout bounds each collective (default DefaultTimeout).
	Timeout time.Duration
	// Name prefixes the group's keys in the store (several groups).
	Name string
	// Transport chooses between shared memory and TCP per peer
	// (TransportAuto, TransportTCP, TransportSHM); empty: the
	// GORUN_CPU_TRANSPORT environment variable, else auto.
	Transport string
	// Watchdog, when set, watches every operation of the group and
	// records it in its flight recorder, where PGID names the group; it
	// judges timeouts (the transport's own deadline comes later, as a
	// backstop), and a failed Wait reports to it before returning.
	Watchdog *watchdog.Watchdog
	PGID     int
	// Secret authenticates the CPU backend's mesh: a connection is
	// believed only once it proved it knows the job's secret (the zero
	// Secret: any connection is). An Env sets GORUN_JOB_SECRET's.
	Secret Secret
	// Log receives the lines about refused connections (nil: os.Stderr).
	Log io.Writer
}

// ErrStopped is in the error of an operation that failed because this
// rank closed its group (it is being stopped) while the operation was
// queued or running: not a collective failure. Test with errors.Is.
var ErrStopped = watchdog.ErrStopped

// Group is a process group on the CPU backend.
type Group struct {
	rank, size int
	backend    Backend
	opt        Options
	comm       memory.Stream
	store      Store
	host       string
	// ranks maps this group's ranks to its parent's (nil: the world).
	ranks []int

	closing atomic.Bool // Close began: what fails now was stopped
	mu      sync.Mutex
	broken  error      // the first failure: later calls fail fast
	coal    *coalescer // operations gathered between Start and EndCoalescing
	// Sequence numbers of the flight recorder: collectives, point-to-
	// point operations, all operations.
	collSeq, p2pSeq, opID int64
}

// NewGroup connects rank of size ranks through st.
func NewGroup(ctx context.Context, st Store, rank, size int, host string, opt Options) (*Group, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("comm: rank %d of %d: want 0 <= rank < size", rank, size)
	}
	if opt.Device == nil || opt.Allocator == nil || opt.Engine == nil {
		return nil, errors.New("comm: Options need a Device, an Allocator and an Engine")
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	prefix := "pg/" + opt.Name + "/"
	transport := opt.Transport
	if transport == "" {
		transport = os.Getenv(TransportEnv)
	}
	switch transport {
	case TransportAuto, TransportTCP, TransportSHM:
	default:
		return nil, fmt.Errorf("comm: %s=%q: want tcp or shm (unset: shared memory on one host, else TCP)", TransportEnv, transport)
	}
	logw := opt.Log
	if logw == nil {
		logw = os.Stderr
	}
	m, err := connectMesh(ctx, st, meshConfig{prefix: prefix, rank: rank, size: size, host: host, secret: opt.Secret, log: logw})
	if err != nil {
		return nil, err
	}
	if err := m.setupShm(transport); err != nil {
		m.close()
		m.unmapShm()
		return nil, err
	}
	g, err := NewGroupOn(rank, size, func(memory.Stream) (Backend, error) { return newCPUBackend(rank, size, m), nil }, opt)
	if err != nil {
		return nil, err
	}
	g.store, g.host = st, host
	return g, nil
}

// NewGroupOn makes a group over another backend (a vendor library's):
// the group brings the communication stream (made with
// opt.Device.NewStream and given to makeBackend), the order of
// operations, Works and the reuse engine.
func NewGroupOn(rank, size int, makeBackend func(stream memory.Stream) (Backend, error), opt Options) (*Group, error) {
	if opt.Device == nil || opt.Allocator == nil || opt.Engine == nil {
		return nil, errors.New("comm: Options need a Device, an Allocator and an Engine")
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	s := opt.Device.NewStream()
	b, err := makeBackend(s)
	if err != nil {
		return nil, err
	}
	if opt.Watchdog != nil {
		opt.Watchdog.OnAbort(b.Shutdown)
	}
	return &Group{rank: rank, size: size, backend: b, opt: opt, comm: s}, nil
}

// Stream is the group's communication stream.
func (g *Group) Stream() memory.Stream { return g.comm }

// Rank is this process's rank in the group; Size the group's size.
func (g *Group) Rank() int { return g.rank }

// Size is the number of ranks.
func (g *Group) Size() int { return g.size }

// Close ends the connections; pending collectives fail. It waits (up to
// a minute) for the group's stream to finish its queue before releasing
// the shared memory. Close the group before its device.
func (g *Group) Close() error {
	g.closing.Store(true)
	g.backend.Shutdown()
	ev := g.opt.Device.NewEvent()
	g.opt.Device.Record(ev, g.comm)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := g.opt.Device.Synchronize(ctx, ev); err != nil {
		return fmt.Errorf("comm: close: the group's stream did not finish: %w", err)
	}
	g.backend.Release()
	return nil
}

// Work is an asynchronous operation.
type Work struct {
	g       *Group
	mw      *memory.Work
	done    chan struct{}
	err     error
	started atomic.Bool
	watched *watchdog.Op // nil without a watchdog
}

// Started reports whether the operation began to run on the group's
// stream.
func (w *Work) Started() bool { return w.started.Load() }

// Wait blocks until the operation is done, orders the caller's stream
// after it and releases what the reuse mode held; it returns the
// operation's error.
func (w *Work) Wait(ctx context.Context) error {
	if w.mw == nil {
		return errors.New("comm: Wait inside a coalescing block: call EndCoalescing first")
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if ctx.Err() != nil {
		// The caller gave up (it is being stopped, say): what the
		// operation met since is not for the watchdog to report.
		return ctx.Err()
	}
	if err := w.g.opt.Device.Synchronize(ctx, w.mw.End); err != nil {
		return err
	}
	w.g.opt.Engine.Wait(w.mw, w.g.opt.Compute)
	if w.err != nil && w.watched != nil {
		w.g.opt.Watchdog.Report(*w.watched, w.err) // may end the process
	}
	return w.err
}

// IsCompleted reports whether the operation finished (well or not): on
// a device, when the stream passed its end (a vendor library's call only
// enqueues it).
func (w *Work) IsCompleted() bool {
	select {
	case <-w.done:
		return w.mw == nil || w.g.opt.Device.Query(w.mw.End)
	default:
		return false
	}
}

// Err is the operation's error once completed (nil before).
func (w *Work) Err() error {
	if !w.IsCompleted() {
		return nil
	}
	return w.err
}

// MemoryWork is the reuse engine's view of w, for a watchdog.
func (w *Work) MemoryWork() *memory.Work { return w.mw }

// opInfo names an operation for the flight recorder: its element type
// (Uint8 for operations that move bytes).
type opInfo struct {
	name  string
	p2p   bool
	dtype DType
}

// launch runs fn on the group's stream after the caller's stream, with
// tensors protected by the reuse engine; with a watchdog, the operation is
// recorded and watched.
func (g *Group) launch(info opInfo, fn func(deadline time.Time) error, tensors ...*memory.Tensor) (*Work, error) {
	g.mu.Lock()
	broken, coal := g.broken, g.coal
	g.mu.Unlock()
	if broken != nil {
		return nil, fmt.Errorf("comm: %s: the process group failed earlier: %w", info.name, broken)
	}
	if coal != nil {
		return coal.add(info.name, fn, tensors), nil
	}
	dev, eng := g.opt.Device, g.opt.Engine
	eng.Drain()
	ready := dev.NewEvent()
	dev.Record(ready, g.opt.Compute)
	dev.StreamWait(g.comm, ready)
	w := &Work{g: g, done: make(chan struct{})}
	regions := make([]memory.Region, len(tensors))
	for i, t := range tensors {
		regions[i] = t.Region()
	}
	timeout := g.opt.Timeout
	w.mw = &memory.Work{Stream: g.comm, End: dev.NewEvent(), P2P: info.p2p}
	if g.opt.Watchdog != nil {
		timeout += watchdogBackstop
		// Recorded before it can start: a dump never misses an operation
		// that a peer already sees.
		w.watched = g.record(w, info, tensors)
	}
	dev.Launch(g.comm, memory.Op{Name: info.name, Reads: regions, Writes: regions, Run: func() {
		w.started.Store(true)
		w.err = g.run(info.name, fn, time.Now().Add(timeout))
		if w.err != nil {
			g.mu.Lock()
			if g.broken == nil {
				g.broken = w.err
			}
			g.mu.Unlock()
			g.backend.Shutdown() // the others see this rank go, at once
		}
		close(w.done)
	}})
	dev.Record(w.mw.End, g.comm)
	eng.Launch(w.mw, tensors...)
	if w.watched != nil {
		g.opt.Watchdog.Watch(*w.watched)
	}
	return w, nil
}

// run runs an operation that reached the head of the group's stream,
// unless the group was closed or failed since it was queued: a queued
// operation that ran after a failure would send into links that a
// failed operation left in the middle of a message, and the peer would
// read it as a desync.
func (g *Group) run(name string, fn func(deadline time.Time) error, deadline time.Time) error {
	if g.closing.Load() {
		return g.stopped(name, nil)
	}
	g.mu.Lock()
	broken := g.broken
	g.mu.Unlock()
	if broken != nil {
		return fmt.Errorf("comm: %s: the process group failed earlier: %w", name, broken)
	}
	err := fn(deadline)
	if err != nil && g.closing.Load() {
		return g.stopped(name, err)
	}
	return err
}

// stopped is the error of operation name, met by err, once this rank
// closed the group.
func (g *Group) stopped(name string, err error) error {
	if err == nil {
		return fmt.Errorf("comm: rank %d: %s: %w: the process group was closed before it ran (this rank is stopping)", g.rank, name, ErrStopped)
	}
	return fmt.Errorf("comm: rank %d: %s: %w: the process group was closed while it ran (this rank is stopping): %w", g.rank, name, ErrStopped, err)
}

// watchdogBackstop is how long after the watchdog's timeout the
// transport gives up on its own.
const watchdogBackstop = 5 * time.Second

// record records w in the flight recorder and returns what the watchdog
// will watch.
// The sizes are the output's (the first tensor) and the input's (the
// last) in elements of info.dtype.
func (g *Group) record(w *Work, info opInfo, tensors []*memory.Tensor) *watchdog.Op {
	g.mu.Lock()
	seq := g.collSeq
	if info.p2p {
		seq = g.p2pSeq
		g.p2pSeq++
	} else {
		g.collSeq++
	}
	opID := g.opID
	g.opID++
	g.mu.Unlock()
	e := watchdog.Entry{PGID: g.opt.PGID, ProcessGroup: [2]string{strconv.Itoa(g.opt.PGID), g.opt.Name},
		OpID: opID, ProfilingName: "gorun:" + info.name, TimeoutMs: g.opt.Timeout.Milliseconds(), IsP2P: info.p2p,
		InputSizes: [][]int64{}, OutputSizes: [][]int64{}, InputDtypes: []string{}, OutputDtypes: []string{}}
	if info.p2p {
		e.P2PSeqID = seq
	} else {
		e.CollectiveSeqID = seq
	}
	if len(tensors) > 0 {
		es := int64(info.dtype.Size())
		out, in := tensors[0], tensors[len(tensors)-1]
		e.OutputSizes, e.OutputDtypes = [][]int64{{out.Size() / es}}, []string{info.dtype.String()}
		e.InputSizes, e.InputDtypes = [][]int64{{in.Size() / es}}, []string{info.dtype.String()}
	}
	now := time.Now()
	id := g.opt.Watchdog.Recorder().Record(e, now)
	op := watchdog.Op{State: w, RecordID: id, PGID: g.opt.PGID, Name: info.name, Seq: seq, P2P: info.p2p, Created: now, Timeout: g.opt.Timeout,
		// Nobody may Wait: the watchdog hands the shelf over, and the
		// next call into the group releases it (Engine.Drain).
		OnComplete: func() { g.opt.Engine.Completed(w.mw) }}
	return &op
}
