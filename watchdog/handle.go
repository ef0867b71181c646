package watchdog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/workerenv"
)

// Exit codes of a worker that the watchdog ends (documented in
// docs/watchdog.md; gorun's failure summary names them).
const (
	// ExitCollectiveTimeout: a collective ran past its timeout here.
	ExitCollectiveTimeout = 124
	// ExitCollectiveError: a collective failed here (a dead peer, an
	// asynchronous error).
	ExitCollectiveError = 123
	// ExitRemoteAbort: another rank's failure stopped this one.
	ExitRemoteAbort = 122
	// ExitWatchdogStuck: the watchdog itself stopped making progress.
	ExitWatchdogStuck = 121
)

// ExitCode is the exit code for a failure of kind.
func ExitCode(kind string) int {
	switch kind {
	case KindTimeout:
		return ExitCollectiveTimeout
	case KindError:
		return ExitCollectiveError
	case KindStuck:
		return ExitWatchdogStuck
	}
	return ExitRemoteAbort
}

// ErrorHandling is what happens after a failure, as PyTorch's
// TORCH_NCCL_ASYNC_ERROR_HANDLING: abort the communicators (clean up)
// and/or end the process (tear down).
type ErrorHandling int

// The modes, numbered as PyTorch numbers them.
const (
	NoHandling  ErrorHandling = 0 // neither: the caller sees the error
	TearDown    ErrorHandling = 1 // abort, then end the process
	CleanUpOnly ErrorHandling = 2 // abort; the process goes on
	SkipCleanUp ErrorHandling = 3 // end the process without aborting (PyTorch's default)
)

// CleanUp reports whether the mode aborts the communicators.
func (m ErrorHandling) CleanUp() bool { return m == TearDown || m == CleanUpOnly }

// TearsDown reports whether the mode ends the process.
func (m ErrorHandling) TearsDown() bool { return m == TearDown || m == SkipCleanUp }

// ErrorHandlingFromEnv reads GORUN_ASYNC_ERROR_HANDLING, else
// TORCH_NCCL_ASYNC_ERROR_HANDLING or NCCL_ASYNC_ERROR_HANDLING; the
// default is TearDown: a CPU group's abort is cheap and makes the peers
// fail at once.
func ErrorHandlingFromEnv() (ErrorHandling, error) {
	for _, name := range []string{"GORUN_ASYNC_ERROR_HANDLING", workerenv.NCCLAsyncErrorHandling, workerenv.NCCLAsyncErrorHandlingOld} {
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 3 {
			return 0, fmt.Errorf("watchdog: %s=%q: want 0 (no handling), 1 (tear down), 2 (clean up only) or 3 (skip clean-up)", name, v)
		}
		return ErrorHandling(n), nil
	}
	return TearDown, nil
}

// Signal is the store through which ranks tell each other of a failure
// (an interface of its consumer; comm's store satisfies it).
type Signal interface {
	Set(ctx context.Context, key, value string) error
	// Get waits until key is set.
	Get(ctx context.Context, key string) (string, error)
	// Create sets key unless it is set and returns the value it then has.
	Create(ctx context.Context, key, value string) (string, error)
}

// SignalKey is the store key of the first failure in a job; DumpedKey
// prefixes the keys by which each rank says its dump is written (or, with
// GoneValue, that its process ended without one).
const (
	SignalKey = "gorun/watchdog/failure"
	DumpedKey = "gorun/watchdog/dumped/"
)

// GoneValue is a rank's DumpedKey value once its process is gone without
// a dump: the store sets it when the rank's connection ends (comm's
// StoreClient.CreateOnClose), so nobody waits for a dump that a killed
// rank will never write.
const GoneValue = "gone"

// DefaultDumpWait bounds how long a failing rank waits for the others'
// dumps before it ends (see Handler.WaitForDumps).
const DefaultDumpWait = 10 * time.Second

// Handler does what a failure calls for: report it, dump the flight
// recorder, tell the other ranks, abort the communicators and end the
// process, as the mode says. Handle runs at most once.
type Handler struct {
	Rank, WorldSize int
	Recorder        *Recorder
	// DumpDir receives the dump (empty: no dump).
	DumpDir string
	Mode    ErrorHandling
	// Signal, when set, carries a local failure to the other ranks.
	Signal Signal
	// Abort aborts every communicator of the process.
	Abort func()
	// Exit ends the process (os.Exit in a worker).
	Exit func(code int)
	// Log receives the report (os.Stderr in a worker).
	Log io.Writer
	// BeforeDump, when set, runs before each dump (Watchdog.Refresh).
	BeforeDump func()
	// WaitForDumps: before ending, wait for every rank's dump (up to
	// DumpWait, default DefaultDumpWait): the first rank to end makes
	// gorun stop the others, and rank 0 serves the store, so nobody may
	// leave before every rank has dumped.
	WaitForDumps bool
	DumpWait     time.Duration

	once sync.Once

	logMu sync.Mutex

	stopMu sync.Mutex
	// stopped is closed by Stopping; stoppedAt is when.
	stopped   chan struct{}
	stoppedAt time.Time
}

// logf writes a line to Log; the handler's goroutines share it.
func (h *Handler) logf(format string, args ...any) {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	fmt.Fprintf(h.Log, format, args...)
}

// Stopping tells h that the process is asked to stop (its agent ends the
// round with SIGTERM or SIGINT): a wait for the other ranks' dumps, under
// way or to come, lasts StopDumpGrace from now at most. A program that
// takes those signals itself (signal.NotifyContext) calls it, as the
// signal may arrive before a failure is handled; h also watches for them
// from the moment it handles one.
func (h *Handler) Stopping() {
	h.stopMu.Lock()
	defer h.stopMu.Unlock()
	h.initStopLocked()
	if h.stoppedAt.IsZero() {
		h.stoppedAt = time.Now()
		close(h.stopped)
	}
}

func (h *Handler) initStopLocked() {
	if h.stopped == nil {
		h.stopped = make(chan struct{})
	}
}

// stopState is the channel Stopping closes, and when it did.
func (h *Handler) stopState() (<-chan struct{}, time.Time) {
	h.stopMu.Lock()
	defer h.stopMu.Unlock()
	h.initStopLocked()
	return h.stopped, h.stoppedAt
}

// Handle acts on f once; later calls return at once.
func (h *Handler) Handle(f Failure) {
	h.once.Do(func() { h.handle(f) })
}

func (h *Handler) handle(f Failure) {
	h.logf("gorun watchdog: %s\n", f)
	if f.Kind == KindStopped {
		// The rank is being stopped and closes its groups: nothing to
		// tell the others (they see its connections close), nothing to
		// dump, nothing to end.
		return
	}
	if h.Signal != nil && h.WaitForDumps && h.Mode.TearsDown() {
		// From now on SIGTERM and SIGINT cut the coming wait for dumps
		// (the process ends once the failure is handled): one that comes
		// while this rank reports or dumps is not lost.
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(sigs)
		handled := make(chan struct{})
		defer close(handled)
		go func() {
			select {
			case sig := <-sigs:
				h.logf("gorun watchdog: rank %d asked to stop (%v): waiting at most %v more for the other ranks' dumps\n", h.Rank, sig, StopDumpGrace)
				h.Stopping()
			case <-handled:
			}
		}()
	}
	wait := h.DumpWait
	if wait <= 0 {
		wait = DefaultDumpWait
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if f.Kind != KindRemote && h.Signal != nil {
		b, _ := json.Marshal(f)
		first, err := h.Signal.Create(ctx, SignalKey, string(b))
		switch {
		case err != nil:
			h.logf("gorun watchdog: could not tell the other ranks: %v\n", err)
		case first != string(b):
			var ff Failure
			if json.Unmarshal([]byte(first), &ff) == nil {
				h.logf("gorun watchdog: reported first: %s\n", ff)
			}
		}
	}
	if h.DumpDir != "" {
		if path, err := h.DumpNow("watchdog: " + f.String()); err != nil {
			h.logf("gorun watchdog: %v\n", err)
		} else {
			h.logf("gorun watchdog: flight recorder dumped to %s\n", path)
		}
	}
	if h.Signal != nil {
		h.awaitDumps(ctx)
	}
	if h.Mode.CleanUp() && h.Abort != nil {
		h.Abort()
	}
	// A stuck watchdog ends the process in every mode, as PyTorch's
	// heartbeat monitor does: nothing else would.
	if (h.Mode.TearsDown() || f.Kind == KindStuck) && h.Exit != nil {
		h.Exit(ExitCode(f.Kind))
	}
}

// StopDumpGrace bounds the wait for the other ranks' dumps once the
// process is asked to stop (SIGTERM, SIGINT: its agent ends the round).
// The ranks still alive got the same request and dumped at their
// failure; a rank that was killed never will.
const StopDumpGrace = time.Second

// awaitDumps says this rank's dump is written and waits (until ctx ends)
// for every rank's, or for the word that a rank is gone (GoneValue). Once the process is asked to stop (Stopping, or
// SIGTERM or SIGINT while the failure is handled), it waits StopDumpGrace
// from that moment at most: the ranks still alive got the same request
// and dumped at their failure; a rank that was killed never will.
func (h *Handler) awaitDumps(ctx context.Context) {
	if err := h.Signal.Set(ctx, DumpedKey+strconv.Itoa(h.Rank), "1"); err != nil || !h.WaitForDumps || !h.Mode.TearsDown() {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waited := make(chan struct{})
	defer close(waited)
	go func() {
		stopped, _ := h.stopState()
		select {
		case <-stopped:
			_, at := h.stopState()
			t := time.NewTimer(StopDumpGrace - time.Since(at))
			defer t.Stop()
			select {
			case <-t.C:
				cancel()
			case <-waited:
			}
		case <-waited:
		}
	}()
	for r := range h.WorldSize {
		v, err := h.Signal.Get(ctx, DumpedKey+strconv.Itoa(r))
		if err != nil {
			h.unknownDumps(r, err)
			return
		}
		if v == GoneValue {
			h.logf("gorun watchdog: rank %d is gone (its process ended without a dump): not waiting for it\n", r)
		}
	}
}

// unknownDumps says which ranks, from rank from on, may not have dumped
// once the store could not say (err): a dump file of theirs in DumpDir
// (the ranks of this node) settles it; for the others gorun cannot know.
// The store often ends with the rank that hosts it, right after that
// rank dumped: "did not dump" would then be false.
func (h *Handler) unknownDumps(from int, err error) {
	var unknown []string
	for r := from; r < h.WorldSize; r++ {
		if h.DumpDir != "" {
			if _, serr := os.Stat(filepath.Join(h.DumpDir, DumpFileName(r))); serr == nil {
				continue
			}
		}
		unknown = append(unknown, strconv.Itoa(r))
	}
	if len(unknown) == 0 {
		return
	}
	if errors.Is(err, context.Canceled) {
		h.logf("gorun watchdog: stopped waiting for the dumps of rank(s) %s: this rank is asked to stop\n", strings.Join(unknown, ", "))
		return
	}
	if errors.Is(err, context.DeadlineExceeded) {
		h.logf("gorun watchdog: rank(s) %s did not report a dump of their flight recorder in time\n", strings.Join(unknown, ", "))
		return
	}
	h.logf("gorun watchdog: cannot tell whether rank(s) %s dumped their flight recorder: the store is unreachable (%v), and may have ended with the rank that hosts it\n", strings.Join(unknown, ", "), err)
}

// DumpNow writes the flight recorder into DumpDir.
func (h *Handler) DumpNow(reason string) (string, error) {
	if h.BeforeDump != nil {
		h.BeforeDump()
	}
	return WriteDump(h.DumpDir, h.Recorder.Dump(h.Rank, h.WorldSize, reason, time.Now()))
}

// WatchSignal waits for another rank's failure on sig and hands it to h
// (as KindRemote, naming the rank that failed); it returns when ctx ends.
func WatchSignal(ctx context.Context, sig Signal, h *Handler) {
	v, err := sig.Get(ctx, SignalKey)
	if err != nil || ctx.Err() != nil {
		return
	}
	var f Failure
	if json.Unmarshal([]byte(v), &f) != nil {
		f = Failure{Rank: -1}
	}
	if f.Rank == h.Rank {
		return // our own report
	}
	h.Handle(Failure{Kind: KindRemote, Rank: f.Rank, PGID: f.PGID, Seq: f.Seq, Op: f.Op, Err: f.String()})
}
