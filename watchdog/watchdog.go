package watchdog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInterval is the most time between two looks at the in-flight
// operations (ProcessGroupNCCL's kWatchdogThreadSleepMillis).
const DefaultInterval = 100 * time.Millisecond

// State is what the watchdog asks of an in-flight operation (a
// comm.Work).
type State interface {
	// Started reports whether the operation began to run.
	Started() bool
	// IsCompleted reports whether it finished, well or not.
	IsCompleted() bool
	// Err is its error once completed.
	Err() error
}

// Op is one in-flight operation to watch.
type Op struct {
	State State
	// RecordID is its flight-recorder entry (-1: none).
	RecordID int64
	PGID     int
	Name     string // e.g. all_reduce
	Seq      int64  // collective (or p2p) sequence number in its group
	P2P      bool
	Created  time.Time
	Timeout  time.Duration
	// OnComplete, when set, runs on the watchdog's goroutine once the
	// operation completed well (the reuse engine's hand-off).
	OnComplete func()
}

// Failure kinds.
const (
	KindTimeout = "timeout" // an operation ran past its timeout here
	KindError   = "error"   // an operation failed here
	KindRemote  = "remote"  // another rank reported a failure
	KindStuck   = "stuck"   // the watchdog itself stopped making progress
	KindStopped = "stopped" // this rank was stopped while an operation was in flight
)

// ErrStopped is in the error of an operation that failed because its
// rank closed the operation's group (the rank is being stopped, by
// SIGTERM say): the watchdog reports it as KindStopped, never as a
// failure of the collective (errors.Is).
var ErrStopped = errors.New("stopped")

// Failure is what the watchdog found: the first operation that timed out
// or failed (or, for KindRemote, what another rank found).
type Failure struct {
	Kind    string        `json:"kind"`
	Rank    int           `json:"rank"`
	PGID    int           `json:"pg_id"`
	Seq     int64         `json:"seq"`
	Op      string        `json:"op"`
	P2P     bool          `json:"is_p2p"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Timeout time.Duration `json:"timeout_ns"`
	Err     string        `json:"error,omitempty"`
}

func (f Failure) String() string {
	switch f.Kind {
	case KindTimeout:
		return fmt.Sprintf("rank %d: collective %s (group %d, sequence number %d) ran for %v, past its timeout of %v",
			f.Rank, f.Op, f.PGID, f.Seq, f.Elapsed.Round(time.Millisecond), f.Timeout)
	case KindError:
		return fmt.Sprintf("rank %d: collective %s (group %d, sequence number %d) failed: %s", f.Rank, f.Op, f.PGID, f.Seq, f.Err)
	case KindStuck:
		return fmt.Sprintf("rank %d: the watchdog made no progress for %v", f.Rank, f.Elapsed)
	case KindStopped:
		return fmt.Sprintf("rank %d: stopped while collective %s (group %d, sequence number %d) was in flight: its process group was closed (not a collective failure)",
			f.Rank, f.Op, f.PGID, f.Seq)
	}
	return "another rank failed first: " + f.Err
}

// Config configures a Watchdog.
type Config struct {
	// Rank is this process's global rank, for Failures.
	Rank int
	// Recorder gets each operation's start and completion (may be nil).
	Recorder *Recorder
	// Interval is the most time between two looks (default
	// DefaultInterval); a new operation or Stop wakes the watchdog at once.
	Interval time.Duration
	// OnFailure is called once, on the watchdog's goroutine, with the
	// first failure; the watchdog then stops.
	OnFailure func(Failure)
}

// Watchdog watches in-flight operations: it records their start and
// completion, and reports the first that times out or fails. Run it on a
// goroutine of its owner; Stop or the context ends it.
type Watchdog struct {
	cfg       Config
	mu        sync.Mutex
	ops       []Op
	aborts    []func()
	checks    []func() error
	wake      chan struct{}
	heartbeat atomic.Uint64
	failed    atomic.Bool
}

// Recorder is the watchdog's flight recorder (nil: none; its methods
// then do nothing).
func (w *Watchdog) Recorder() *Recorder { return w.cfg.Recorder }

// OnAbort adds a communicator's abort to those AbortAll runs.
func (w *Watchdog) OnAbort(abort func()) {
	w.mu.Lock()
	w.aborts = append(w.aborts, abort)
	w.mu.Unlock()
}

// OnCheck adds a communicator's asynchronous-error query (such as
// ncclCommGetAsyncError), asked at every look.
func (w *Watchdog) OnCheck(check func() error) {
	w.mu.Lock()
	w.checks = append(w.checks, check)
	w.mu.Unlock()
}

// AbortAll aborts every communicator added with OnAbort.
func (w *Watchdog) AbortAll() {
	w.mu.Lock()
	aborts := slices.Clone(w.aborts)
	w.mu.Unlock()
	for _, a := range aborts {
		a()
	}
}

// Report hands a failed operation to OnFailure at once (the caller is
// about to see the error: a Wait), and returns when OnFailure does.
func (w *Watchdog) Report(op Op, err error) {
	f := w.failureOf(op, err, time.Now())
	w.failed.Store(true)
	w.poke()
	if w.cfg.OnFailure != nil {
		w.cfg.OnFailure(f)
	}
}

// New makes a watchdog; Run starts it.
func New(cfg Config) *Watchdog {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	return &Watchdog{cfg: cfg, wake: make(chan struct{}, 1)}
}

// Watch adds an operation.
func (w *Watchdog) Watch(op Op) {
	w.mu.Lock()
	w.ops = append(w.ops, op)
	w.mu.Unlock()
	w.poke()
}

func (w *Watchdog) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// InFlight is the number of operations watched.
func (w *Watchdog) InFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ops)
}

// Heartbeat counts the watchdog's looks; a heartbeat that stops moving
// means the watchdog is stuck (see MonitorHeartbeat).
func (w *Watchdog) Heartbeat() uint64 { return w.heartbeat.Load() }

// Failed reports whether the watchdog found a failure.
func (w *Watchdog) Failed() bool { return w.failed.Load() }

// Run looks at the operations every Interval (or when one is added) until
// ctx ends or a failure was reported.
func (w *Watchdog) Run(ctx context.Context) {
	t := time.NewTimer(w.cfg.Interval)
	defer t.Stop()
	for {
		if f, ok := w.check(time.Now()); ok {
			w.failed.Store(true)
			if w.cfg.OnFailure != nil {
				w.cfg.OnFailure(f)
			}
			return
		}
		w.heartbeat.Add(1)
		t.Reset(w.cfg.Interval)
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-t.C:
		}
	}
}

// Refresh brings the recorder up to date with the operations' progress
// (a dump right after a failure must not show what the next look would
// have corrected).
func (w *Watchdog) Refresh() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for _, op := range w.ops {
		w.note(op, now)
	}
}

// note records op's start and good completion and says whether it is
// done, with its error; w.mu held.
func (w *Watchdog) note(op Op, now time.Time) (done bool, err error) {
	if op.State.Started() {
		w.cfg.Recorder.Started(op.RecordID, now)
	}
	if !op.State.IsCompleted() {
		return false, nil
	}
	if err := op.State.Err(); err != nil {
		return true, err
	}
	w.cfg.Recorder.Completed(op.RecordID, now)
	return true, nil
}

// check updates the recorder and drops finished operations; it returns
// the first failure.
func (w *Watchdog) check(now time.Time) (Failure, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rec := w.cfg.Recorder
	kept := w.ops[:0]
	var failure Failure
	found := false
	for _, op := range w.ops {
		if done, err := w.note(op, now); done {
			switch {
			case err != nil:
				rec.Retire(op.RecordID)
				if !found {
					failure, found = w.failureOf(op, err, now), true
				}
			case op.OnComplete != nil:
				op.OnComplete()
			}
			continue
		}
		if op.Timeout > 0 && now.Sub(op.Created) > op.Timeout && !found {
			rec.Retire(op.RecordID)
			failure, found = w.failure(KindTimeout, op, now), true
		}
		kept = append(kept, op)
	}
	clear(w.ops[len(kept):])
	w.ops = kept
	for _, check := range w.checks {
		if err := check(); err != nil && !found {
			failure, found = Failure{Kind: KindError, Rank: w.cfg.Rank, Op: "asynchronous error", Seq: -1, Err: err.Error()}, true
		}
	}
	return failure, found
}

// failureOf is the failure of op, which ended with err: KindStopped when
// err is a stop (ErrStopped), else KindError.
func (w *Watchdog) failureOf(op Op, err error, now time.Time) Failure {
	kind := KindError
	if errors.Is(err, ErrStopped) {
		kind = KindStopped
	}
	f := w.failure(kind, op, now)
	f.Err = err.Error()
	return f
}

func (w *Watchdog) failure(kind string, op Op, now time.Time) Failure {
	return Failure{Kind: kind, Rank: w.cfg.Rank, PGID: op.PGID, Seq: op.Seq, Op: op.Name, P2P: op.P2P,
		Elapsed: now.Sub(op.Created), Timeout: op.Timeout}
}

// MonitorHeartbeat calls onStuck once if w's heartbeat does not move for
// d while w runs (ProcessGroupNCCL's heartbeat monitor), and returns when
// ctx ends or after onStuck.
func MonitorHeartbeat(ctx context.Context, w *Watchdog, d time.Duration, onStuck func(Failure)) {
	t := time.NewTicker(d)
	defer t.Stop()
	last := w.Heartbeat()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := w.Heartbeat(); now != last || w.Failed() {
			last = now
			continue
		}
		onStuck(Failure{Kind: KindStuck, Rank: w.cfg.Rank, Elapsed: d})
		return
	}
}
