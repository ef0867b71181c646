package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/workerenv"
)

// The variables of gorun's coordinated preemption, set for every worker.
const (
	// StopFileEnv names a file, one per node, that does not exist at
	// start: gorun creates it when the job is asked to stop (SIGTERM to
	// any agent, Slurm's USR1, gorun stop RUN_ID).
	StopFileEnv = workerenv.StopFile
	// StopSignalEnv names the signal, without "SIG" (TERM, USR1, ...),
	// that gorun also sends every worker then; empty or unset: none, only
	// the file appears.
	StopSignalEnv = workerenv.StopSignal
	// ProgressFileEnv names a file, one per worker, where the worker
	// reports its last step (ProgressReporter).
	ProgressFileEnv = workerenv.ProgressFile
	// IgnoredSignalsEnv lists, comma-separated without "SIG", the signals
	// gorun starts the workers with ignored: a scheduler's stop requests
	// (Slurm's USR1), which gorun handles and passes on as StopFileEnv's
	// file. Go installs its own handlers at start and cannot see the
	// inherited SIG_IGN: the package reads this instead.
	IgnoredSignalsEnv = workerenv.IgnoredSignals
)

// launcherIgnores says whether gorun started this worker with sig
// ignored (IgnoredSignalsEnv).
func launcherIgnores(sig syscall.Signal) (bool, error) {
	sigs, err := workerenv.ParseSignalList(os.Getenv(IgnoredSignalsEnv))
	if err != nil {
		return false, fmt.Errorf("comm: %s=%w", IgnoredSignalsEnv, err)
	}
	return slices.Contains(sigs, sig), nil
}

// DefaultPreemptionEvery is how often Agree runs its all-reduce unless
// PreemptionConfig.Every says otherwise: every step.
const DefaultPreemptionEvery = 1

// PreemptionConfig says what a Preemption watches.
type PreemptionConfig struct {
	// StopFile is the file whose existence asks this rank to stop
	// (StopFileEnv's; empty: none).
	StopFile string
	// Signal is the name of the signal that asks this rank to stop
	// (StopSignalEnv's: TERM, USR1, with or without "SIG", any case;
	// empty: none).
	Signal string
	// Every makes Agree run its all-reduce only after every Every-th
	// step (steps k-1, 2k-1, ...) and answer false at the others;
	// 0 means DefaultPreemptionEvery.
	Every int
}

// NewPreemptionConfig is the configuration gorun gives a worker: the
// stop file and signal of its environment, checked at every step.
func NewPreemptionConfig() PreemptionConfig {
	return PreemptionConfig{StopFile: os.Getenv(StopFileEnv), Signal: os.Getenv(StopSignalEnv), Every: DefaultPreemptionEvery}
}

// Validate checks Every and the signal's name.
func (c PreemptionConfig) Validate() error {
	if c.Every < 0 {
		return fmt.Errorf("comm: preemption: every %d: want at least 1 (0: %d)", c.Every, DefaultPreemptionEvery)
	}
	_, err := parseStopSignal(c.Signal)
	return err
}

// Preemption watches for gorun's request to stop the job and lets all
// ranks agree on one step at which every one of them stops.
//
// A rank learns of the request on its own, at a moment of its own: the
// stop file appears (os.Stat finds it), or the stop signal arrives. Ranks
// that stopped whenever they noticed would stop at different steps, and
// those still training would wait in their next collective for peers that
// are gone. So every rank calls Agree at the same point of every step
// (after the optimizer step): Agree ORs the local flags of all ranks with
// one all-reduce MAX of a single int32. Because every rank runs the same
// collective at the same step, they all get the same answer at the same
// step, and all stop together, after the same number of steps: the one to
// save in the checkpoint. The cost is one 4-byte all-reduce per check;
// Every k checks after every k-th step only (a stop then waits up to k-1
// more steps, which must fit gorun's grace period).
//
//	p, err := comm.WatchPreemption(comm.NewPreemptionConfig())
//	defer p.Close()
//	for step := start; step < steps; step++ {
//		trainStep()
//		if stop, err := p.Agree(ctx, env, step); err != nil {
//			return err
//		} else if stop {
//			return save(step + 1) // rank 0, then a barrier; exit 0
//		}
//	}
//
// The stop signal no longer ends the process once watched. It is a stop
// request when the stop file exists as it arrives (gorun creates the file
// before it signals): then it sets the flag. With the plain-stop mark
// (StopFile+".plain", which gorun creates before it stops the workers
// after a failure) it is a plain stop. With neither, the signal came from
// outside gorun (Slurm's scancel and time limit signal every process of
// the job, gorun too): the watcher waits up to 5 s for gorun's word, and
// takes silence for a plain stop (an operator's kill). On a plain stop
// Stopped fires, and a program that ran on Context stops as it
// would have on the signal. A program that cancels its work on SIGTERM
// itself (signal.NotifyContext) must leave Signal out of that list and
// use Context.
type Preemption struct {
	stopFile string
	sig      os.Signal // nil: none
	every    int
	sigc     chan os.Signal
	seen     atomic.Bool
	// stopped closes on a plain stop; done ends the signal goroutine.
	stopped  chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	wg       sync.WaitGroup
	close    sync.Once
}

// WatchPreemption starts watching: it subscribes to cfg's signal
// (signal.Notify) until Close, with one goroutine that tells a stop
// request from a plain stop. A bad signal name is an error that names
// GORUN_STOP_SIGNAL and its value.
func WatchPreemption(cfg PreemptionConfig) (*Preemption, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sig, _ := parseStopSignal(cfg.Signal)
	p := &Preemption{stopFile: cfg.StopFile, every: cfg.Every, stopped: make(chan struct{}), done: make(chan struct{})}
	if p.every == 0 {
		p.every = DefaultPreemptionEvery
	}
	if sig != nil {
		p.sig = sig
		p.sigc = make(chan os.Signal, 1)
		signal.Notify(p.sigc, sig)
		p.wg.Add(1)
		go p.watch()
	}
	return p, nil
}

// watch sorts the signals until Close.
func (p *Preemption) watch() {
	defer p.wg.Done()
	for {
		select {
		case <-p.sigc:
			if p.stopFile == "" || p.isRequest() {
				p.seen.Store(true)
				continue
			}
			p.stopOnce.Do(func() { close(p.stopped) })
		case <-p.done:
			return
		}
	}
}

func (p *Preemption) fileExists() bool {
	_, err := os.Stat(p.stopFile)
	return err == nil
}

// outsideSignalWait bounds the wait for gorun's word on a stop signal
// that came with neither the stop file nor the plain-stop mark: one sent
// from outside (a scheduler signals every process of a job, gorun too,
// which then records the job's request and creates the file).
const outsideSignalWait = 5 * time.Second

// isRequest tells what the stop signal just received means: a stop
// request (the stop file is there, or appears within outsideSignalWait)
// or a plain stop (the mark StopFile+".plain" is there, or the wait ends
// with nothing; Close ends it too).
func (p *Preemption) isRequest() bool {
	deadline := time.Now().Add(outsideSignalWait)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !p.fileExists() {
		if _, err := os.Stat(p.stopFile + ".plain"); err == nil || time.Now().After(deadline) {
			return false
		}
		select {
		case <-tick.C:
		case <-p.done:
			return false
		}
	}
	return true
}

// Signal is the stop signal watched, nil if none.
func (p *Preemption) Signal() os.Signal { return p.sig }

// Enabled reports whether there is anything to watch: gorun sets the stop
// file and signal for every worker of the job or for none, so without
// them (torchrun, a plain run) Agree skips its all-reduce on every rank
// alike.
func (p *Preemption) Enabled() bool { return p.stopFile != "" || p.sig != nil }

// Requested is this rank's own view: the stop file exists, or the stop
// signal came with it. It costs at most one stat; once true it stays
// true. Other ranks may not know yet: act on Agree, not on this.
func (p *Preemption) Requested() bool {
	if p.seen.Load() {
		return true
	}
	if p.stopFile != "" && p.fileExists() {
		p.seen.Store(true)
		return true
	}
	return false
}

// Stopped closes when the stop signal came without the stop file: a
// plain stop, not a stop request.
func (p *Preemption) Stopped() <-chan struct{} { return p.stopped }

// Context returns a context of parent that a plain stop (Stopped) also
// cancels; its goroutine ends with the context.
func (p *Preemption) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-p.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Agree tells every rank of env whether any rank was asked to stop, after
// step: a collective, so every rank must call it at the same point of the
// same steps, and all get the same answer. With Every k, steps other than
// k-1, 2k-1, ... answer false at once; so does every step when nothing is
// watched (Enabled).
func (p *Preemption) Agree(ctx context.Context, env *Env, step int) (bool, error) {
	if !p.Enabled() || (step+1)%p.every != 0 {
		return false, nil
	}
	var flag [4]byte
	if p.Requested() {
		binary.NativeEndian.PutUint32(flag[:], 1)
	}
	t, err := env.Allocator.Empty(int64(len(flag)), env.opt.Compute)
	if err != nil {
		return false, fmt.Errorf("comm: preemption agreement after step %d: %w", step, err)
	}
	defer t.Release()
	if err := env.Upload(t, flag[:]); err != nil {
		return false, fmt.Errorf("comm: preemption agreement after step %d: %w", step, err)
	}
	if err := Sync(ctx)(env.AllReduce(t, Int32, Max)); err != nil {
		return false, fmt.Errorf("comm: preemption agreement after step %d: %w", step, err)
	}
	if err := env.Download(flag[:], t); err != nil {
		return false, fmt.Errorf("comm: preemption agreement after step %d: %w", step, err)
	}
	return binary.NativeEndian.Uint32(flag[:]) != 0, nil
}

// Close stops watching the signal (its default action is back: TERM ends
// the process again). A second Close does nothing.
func (p *Preemption) Close() {
	p.close.Do(func() {
		if p.sigc != nil {
			signal.Stop(p.sigc)
		}
		close(p.done)
		p.wg.Wait()
	})
}

// parseStopSignal reads a GORUN_STOP_SIGNAL value: nil for empty.
func parseStopSignal(s string) (os.Signal, error) {
	sig, err := workerenv.ParseStopSignal(s)
	if err != nil {
		return nil, fmt.Errorf("comm: %s=%w", StopSignalEnv, err)
	}
	if sig == 0 {
		return nil, nil
	}
	return sig, nil
}

// ProgressReporter tells gorun how far this worker got: after each step,
// Step replaces the file named by GORUN_PROGRESS_FILE, atomically, with
// one line (workerenv.ProgressLine has the form). Without the variable
// Step does nothing. A reporter is safe for concurrent use.
type ProgressReporter struct {
	path string
	log  io.Writer
	now  func() time.Time

	mu        sync.Mutex
	started   bool
	firstStep int
	firstTime int64
	warned    bool
}

// NewProgressReporter reports to GORUN_PROGRESS_FILE's path, with a
// failure's warning on stderr.
func NewProgressReporter() *ProgressReporter {
	return newProgressReporter(os.Getenv(ProgressFileEnv), os.Stderr, time.Now)
}

func newProgressReporter(path string, log io.Writer, now func() time.Time) *ProgressReporter {
	return &ProgressReporter{path: path, log: log, now: now}
}

// Step reports step as done. Progress is advisory: a failure to write
// must not stop training, so the first failure is also written to stderr
// and callers may ignore the error.
func (r *ProgressReporter) Step(step int) error {
	if r.path == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now().UnixNano()
	if !r.started {
		r.started, r.firstStep, r.firstTime = true, step, now
	}
	line := workerenv.ProgressLine{Step: step, TimeNs: now, FirstStep: r.firstStep, FirstTimeNs: r.firstTime}
	err := replaceFile(r.path, []byte(line.String()))
	if err != nil && !r.warned {
		r.warned = true
		fmt.Fprintf(r.log, "comm: %s: %v (progress is not reported; training goes on; said once)\n", ProgressFileEnv, err)
	}
	return err
}

// replaceFile writes data to path.tmp and renames it to path, so that a
// reader sees the old content or the new, never part of it.
func replaceFile(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err = errors.Join(err, f.Close()); err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
