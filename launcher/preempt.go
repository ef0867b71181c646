package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/rendezvous"
)

// Coordinated preemption. A stop request (a PreemptSignal delivered to
// any one agent, or `gorun stop RUN_ID` against the store) becomes one
// request in the job's store; every agent learns it, creates the file
// named by GORUN_STOP_FILE and sends its workers PreemptWorkerSignal. The
// workers agree on a step at which all ranks stop (comm.Preemption,
// the gorun_preempt module, on every Python worker's path: package pyhelpers), save a checkpoint and exit 0; gorun
// then exits ExitPreempted, which is neither a failure nor a restart.
// Past the grace period, the workers are stopped as for a stop signal.
const (
	// ExitPreempted is gorun's exit code when the job stopped cleanly on
	// a stop request: sysexits.h's EX_TEMPFAIL ("try again later"), so
	// that a scheduler requeues the job.
	ExitPreempted = 75
	// DefaultPreemptGrace is --preempt-grace's default: inside the 30 s
	// that Slurm (KillWait) and Kubernetes (terminationGracePeriodSeconds)
	// leave between their SIGTERM and their SIGKILL by default, with time
	// left for the stop that follows a grace that ran out.
	DefaultPreemptGrace = 25 * time.Second
	// stopFileName is the stop file's name in the run's folder;
	// plainStopSuffix makes the plain-stop mark's (stopFiles).
	stopFileName    = "stop"
	plainStopSuffix = ".plain"
	// publishTimeout bounds recording a stop request in the store: the
	// workers are told once it is recorded, or past this anyway.
	publishTimeout = 5 * time.Second
	// stopReportTimeout bounds telling the store that a stop request
	// ended the job without a clean stop.
	stopReportTimeout = 10 * time.Second
)

// errPreemptedIdle: a stop request came while no worker ran.
var errPreemptedIdle = errors.New("stop requested while no worker ran")

// preemptor is one agent's side of coordinated preemption. The agent's
// goroutine owns it; only publication runs in a goroutine of its own,
// which reports on published and which wait ends.
type preemptor struct {
	cfg  *Config
	rdzv Preempter // nil: requests stay local
	// requests delivers the store's request (nil once it did, or without
	// a store).
	requests <-chan rendezvous.StopRequest
	// files are the run's stop files: the stop file, whose path the
	// workers get, and the plain-stop mark beside it.
	files    stopFiles
	stopFile string

	req *rendezvous.StopRequest // set once a request is known
	// signalled is set once this agent got a preempt signal itself: only
	// a second one stops at once. A scheduler signals every node (Slurm's
	// scancel, a time limit): a node that learns the job's request from
	// the store before its own signal arrives takes that signal as the
	// same request, not as a second one.
	signalled bool
	// firstSignal and firstAt are the first preempt signal and when it
	// came: the same signal again within signalRepeatWindow is the same
	// request (Slurm's slurmd sends a step SIGTERM twice, milliseconds
	// apart, at a time limit or a preemption without GraceTime).
	firstSignal syscall.Signal
	firstAt     time.Time
	since       time.Time
	deadline    time.Time
	// published reports the local request's publication (nil when none
	// is pending); told is set once the workers were told.
	published chan struct{}
	told      bool
	wg        sync.WaitGroup
	// events receives the stop request (the agent's timeline).
	events *goodput.EventLog
}

// stopFiles are the files that tell the workers what a stop signal
// means. The stop file (GORUN_STOP_FILE) appears before the signal of a
// stop request; the plain-stop mark (the stop file's path with ".plain"
// added) before the signal of a plain stop (a failure elsewhere, a lost
// node), and goes before the next attempt's workers start. A stop signal
// that finds neither came from outside gorun (a scheduler signals every
// process of a job): the workers' helpers wait a moment for gorun to say
// which it is (gorun got the scheduler's signal too).
type stopFiles interface {
	stopFile() string
	createStopFile(content string) error
	markPlainStop() error
	clearPlainStop() error
}

// newPreemptor returns the agent's preemptor; nil when preemption is off.
func newPreemptor(ctx context.Context, cfg *Config, rdzv Rendezvous, files stopFiles) *preemptor {
	if cfg.PreemptGrace <= 0 {
		return nil
	}
	p := &preemptor{cfg: cfg, files: files, stopFile: files.stopFile()}
	if pr, ok := rdzv.(Preempter); ok {
		p.rdzv = pr
		p.requests = pr.WatchStop(ctx)
	}
	return p
}

// env is what every worker gets: the stop file's path, the signal, and
// the signals the workers start with ignored.
func (p *preemptor) env() []EnvVar {
	if p == nil {
		return nil
	}
	vars := []EnvVar{{workerenv.StopFile, p.stopFile}}
	if p.cfg.PreemptWorkerSignal != 0 {
		// TERM, not SIGTERM: what the shell's trap and kill -s take.
		vars = append(vars, EnvVar{workerenv.StopSignal, workerenv.FormatStopSignal(p.cfg.PreemptWorkerSignal)})
	}
	if ignored := p.cfg.workerIgnoredSignals(); len(ignored) > 0 {
		vars = append(vars, EnvVar{workerenv.IgnoredSignals, workerenv.FormatSignalList(ignored)})
	}
	return vars
}

// storeRequests is the channel of the store's request (nil when none
// can come).
func (p *preemptor) storeRequests() <-chan rendezvous.StopRequest {
	if p == nil {
		return nil
	}
	return p.requests
}

// active reports whether a stop request is known.
func (p *preemptor) active() bool { return p != nil && p.req != nil }

// signalRepeatWindow is how soon after the first preempt signal the same
// signal again is taken for a repeat of the same request, not for "stop
// the workers now": far above a scheduler's repeat (Slurm's: ~7 ms), below
// a person's second try.
const signalRepeatWindow = time.Second

// isPreemptSignal reports whether sig asks for a clean stop: one of
// PreemptSignals, the first this agent got, or a quick repeat of it.
func (p *preemptor) isPreemptSignal(sig syscall.Signal) bool {
	if p == nil || !slices.Contains(p.cfg.PreemptSignals, sig) {
		return false
	}
	return !p.signalled || p.isRepeat(sig)
}

// isRepeat says whether sig repeats the first preempt signal within
// signalRepeatWindow.
func (p *preemptor) isRepeat(sig syscall.Signal) bool {
	window := signalRepeatWindow
	if p.cfg.signalRepeatWindow != 0 {
		window = p.cfg.signalRepeatWindow
	}
	return p.signalled && sig == p.firstSignal && time.Since(p.firstAt) < window
}

// fromSignal makes the local stop request for sig and publishes it to the
// job in the background (published fires when done); with a request
// known already (the store's), the signal joins it.
func (p *preemptor) fromSignal(sig syscall.Signal) {
	if p.isRepeat(sig) {
		p.cfg.Log.Warnf("received %s again within %v: the same stop request (a scheduler's repeat); send it again later to stop the workers now", SignalName(sig), signalRepeatWindow)
		return
	}
	p.signalled, p.firstSignal, p.firstAt = true, sig, time.Now()
	if p.req != nil {
		p.cfg.Log.Warnf("received %s: the job is already stopping on a stop request (%s); send it again to stop the workers now", SignalName(sig), printable(p.req.Reason))
		return
	}
	req := rendezvous.StopRequest{Reason: fmt.Sprintf("%s on %s", SignalName(sig), p.cfg.Hostname)}
	p.begin(req)
	p.cfg.Log.Warnf("received %s: asking every node of the job to stop cleanly within %v (--preempt-grace; send it again to stop the workers now)", SignalName(sig), p.grace())
	// The goroutine closes its own channel: tell may have dropped
	// p.published by then (the store's request came first).
	published := make(chan struct{})
	p.published = published
	if p.rdzv == nil {
		close(published)
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(published)
		ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		defer cancel()
		if err := p.rdzv.RequestStop(ctx, req); err != nil {
			p.cfg.Log.Errorf("the stop request reaches this node's workers only: %v", err)
		}
	}()
}

// fromStore takes the store's request (another node's, or gorun stop).
func (p *preemptor) fromStore(req rendezvous.StopRequest) {
	p.requests = nil
	if p.req != nil {
		return
	}
	p.begin(req)
	p.cfg.Log.Warnf("the job is asked to stop (%s): telling the workers; they have %v to stop cleanly", printable(req.Reason), p.grace())
}

func (p *preemptor) begin(req rendezvous.StopRequest) {
	p.req, p.since = &req, time.Now()
	p.deadline = p.since.Add(p.grace())
	if p.events != nil {
		p.events.Record(goodput.Event{Kind: goodput.EventStopRequest, Reason: req.Reason, Time: p.since})
	}
}

// grace is the request's grace period, or the agent's own.
func (p *preemptor) grace() time.Duration {
	if p.req != nil && p.req.Grace > 0 {
		return p.req.Grace
	}
	return p.cfg.PreemptGrace
}

// ready is the channel that fires when the workers may be told: the local
// request is recorded (nil while no request is pending or once told).
func (p *preemptor) ready() <-chan struct{} {
	if p == nil || p.told || p.req == nil || p.published == nil {
		return nil
	}
	return p.published
}

// tell creates the stop file and sends the workers the stop signal.
func (p *preemptor) tell(att *attempt) {
	if p.told {
		return
	}
	p.told, p.published = true, nil
	content := fmt.Sprintf("reason=%q deadline=%s\n", p.req.Reason, p.deadline.UTC().Format(time.RFC3339Nano))
	if err := p.files.createStopFile(content); err != nil && !errors.Is(err, os.ErrExist) {
		p.cfg.Log.Errorf("create the stop file %s: %v", p.stopFile, err)
	}
	if att != nil && p.cfg.PreemptWorkerSignal != 0 {
		for _, w := range att.running() {
			if err := w.proc.signal(p.cfg.PreemptWorkerSignal); err != nil {
				p.cfg.Log.Warnf("local rank %d: %v", w.spec.LocalRank, err)
			}
		}
	}
}

// plainStop marks the signal about to stop the workers as a plain stop,
// unless they were told of a stop request.
func (p *preemptor) plainStop() {
	if p == nil || p.told {
		return
	}
	if err := p.files.markPlainStop(); err != nil {
		p.cfg.Log.Warnf("mark the workers' stop as a plain one: %v (their stop helpers wait a moment before they stop)", err)
	}
}

// newAttempt clears the previous attempt's plain-stop mark.
func (p *preemptor) newAttempt() {
	if p == nil {
		return
	}
	if err := p.files.clearPlainStop(); err != nil {
		p.cfg.Log.Warnf("clear the plain-stop mark: %v", err)
	}
}

// stoppedByIt reports whether a worker's exit is the stop signal's doing
// (killed by it, or exited with 128 + it as shells do).
func (p *preemptor) stoppedByIt(st exitStatus) bool {
	if p == nil {
		return false
	}
	sig := p.cfg.PreemptWorkerSignal
	return p.told && sig != 0 && (st.Signal == sig || st.Code == 128+int(sig))
}

// deadlineSignal is the signal that stops workers still running at the
// grace's end: SIGKILL when they got the worker signal with the request
// (they had the whole grace to act on it, and a scheduler's own SIGKILL
// comes soon after: Slurm's KillWait is 30 s, the grace 25 s), else
// SIGTERM and the usual --stop-timeout.
func (p *preemptor) deadlineSignal() syscall.Signal {
	log := p.cfg.Log
	if p.told && p.cfg.PreemptWorkerSignal != 0 {
		log.Errorf("the workers did not stop within --preempt-grace %v of the stop request, though they got %s with it: killing them (SIGKILL)", p.grace(), SignalName(p.cfg.PreemptWorkerSignal))
		return syscall.SIGKILL
	}
	log.Errorf("the workers did not stop within --preempt-grace %v of the stop request: stopping them", p.grace())
	return syscall.SIGTERM
}

// wait waits for the publication goroutine.
func (p *preemptor) wait() {
	if p != nil {
		p.wg.Wait()
	}
}

// deadlineTimer returns a timer channel for the grace period's end.
func (p *preemptor) deadlineTimer() (*time.Timer, <-chan time.Time) {
	if !p.active() {
		return nil, nil
	}
	t := time.NewTimer(time.Until(p.deadline))
	return t, t.C
}

// endPreempted ends a round that ran while a stop request was known, and
// says whether it did: workers that all exited 0 make the job preempted
// once every node's did (ExitPreempted); workers ended by the stop
// signal, or past the deadline, or a round ended elsewhere, stop the job
// (128+SIGTERM, the job reported failed so that every node stops); a
// worker's own failure, or a second stop signal, is left to the usual
// path (ok false), without a restart.
func (a *Agent) endPreempted(ctx context.Context, round rendezvous.Round, att *attempt, out outcome, layout *logLayout, res Result) (Result, bool) {
	cfg := &a.cfg
	// The calls to the store run as the success path's do: a stop signal
	// ends them (a store that went away must not hold the agent).
	call := func(fn func(context.Context) error) (syscall.Signal, error) {
		return a.interruptible(ctx, false, fn)
	}
	stopped := func(why string) (Result, bool) {
		cfg.Log.Errorf("stopped on the stop request (%s): %s", printable(a.pre.req.Reason), why)
		res.ExitCode, res.Signal = 128+int(syscall.SIGTERM), syscall.SIGTERM
		sig, err := call(func(ctx context.Context) error {
			// Best effort, and short: the job is stopping everywhere, and
			// the node hosting the store may be gone already.
			ctx, cancel := context.WithTimeout(ctx, stopReportTimeout)
			defer cancel()
			_, err := a.rdzv.Fail(ctx, round, "stopped: "+why, 0, false)
			return err
		})
		switch {
		case sig != 0:
			res.ExitCode, res.Signal = 128+int(sig), sig
		case errors.Is(err, rendezvous.ErrJobFailed):
			cfg.Log.Debugf("report the stop to the rendezvous: another node did first: %v", err)
		case err != nil:
			cfg.Log.Errorf("report the stop to the rendezvous: %v", err)
		}
		return res, true
	}
	switch {
	case out.kind == outcomeStopDeadline:
		return stopped(fmt.Sprintf("the workers did not stop within %v", a.pre.grace()))
	case out.kind == outcomeSucceeded && out.stoppedBySignal:
		return stopped(fmt.Sprintf("workers ended by %s instead of saving and exiting 0 (a script that does not handle the stop request)", SignalName(cfg.PreemptWorkerSignal)))
	case out.kind == outcomeInterrupted:
		return stopped("the round ended: " + out.event.Reason)
	case out.kind != outcomeSucceeded:
		return res, false
	}
	var err error
	sig, _ := call(func(ctx context.Context) error {
		if a.pre.rdzv != nil {
			err = a.pre.rdzv.SucceedStopped(ctx, round)
		} else {
			err = a.rdzv.Succeed(ctx, round)
			if err == nil {
				err = rendezvous.ErrPreempted // one node, no store: this node's workers are the job
			}
		}
		return err
	})
	switch {
	case sig != 0:
		res.ExitCode, res.Signal = 128+int(sig), sig
		return res, true
	case err == nil:
		cfg.Log.Infof("the job finished before it had to stop")
		return res, true
	case errors.Is(err, rendezvous.ErrPreempted):
		cfg.Log.Warnf("preempted cleanly: every worker saved and exited 0 on the stop request (%s); exiting %d", printable(a.pre.req.Reason), ExitPreempted)
		res.ExitCode, res.Preempted = ExitPreempted, true
		return res, true
	case errors.Is(err, rendezvous.ErrRoundEnded):
		return stopped("the round ended on another node")
	case errors.Is(err, rendezvous.ErrJobFailed):
		// Another node's workers did not stop cleanly, or failed: the job
		// stopped, not preempted.
		cfg.Log.Errorf("this node's workers saved and exited 0, but the job did not stop cleanly everywhere: %v", err)
		res.ExitCode, res.Signal = 128+int(syscall.SIGTERM), syscall.SIGTERM
		return res, true
	}
	cfg.Log.Errorf("the job's outcome: %v", err)
	res.ExitCode = 1
	return res, true
}

// printable shows s with control characters escaped: a stop request's
// reason comes from whoever asked.
func printable(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
