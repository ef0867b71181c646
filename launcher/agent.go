package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
)

// Rendezvous is what the agent needs from a rendezvous backend; the
// backends live in package rendezvous.
type Rendezvous interface {
	// Next joins the next round and blocks until it closes.
	Next(ctx context.Context, node rendezvous.Node) (rendezvous.Round, error)
	// Watch returns a channel that delivers an event when the round must
	// end for a reason outside this node; a nil channel if that cannot
	// happen. It stops when ctx ends.
	Watch(ctx context.Context, round rendezvous.Round) <-chan rendezvous.Event
	// Close leaves the rendezvous.
	Close(ctx context.Context) error
}

// closeTimeout bounds leaving the rendezvous when the agent ends.
const closeTimeout = 10 * time.Second

// Result is how a run ended.
type Result struct {
	// ExitCode is what gorun exits with: 0, the first failed worker's exit
	// code (128+signal for a worker killed by a signal), or 128+signal when
	// gorun itself was stopped by a signal.
	ExitCode int
	// Restarts counts the failure restarts made.
	Restarts int
	// Signal is the stop signal gorun received, if that ended the run.
	Signal syscall.Signal
	// Failures are the last attempt's failures, root cause first.
	Failures []Failure
}

// Agent runs one node's workers: rendezvous, start, monitor, restart.
type Agent struct {
	cfg     Config
	rdzv    Rendezvous
	signals <-chan os.Signal
	policy  RestartPolicy
	stdout  *Console
	stderr  *Console
}

// NewAgent validates cfg and returns an agent. signals delivers the signals
// the caller subscribed to (cfg.StopSignals and cfg.ForwardSignals); nil
// means none.
func NewAgent(cfg Config, rdzv Rendezvous, signals <-chan os.Signal) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Agent{
		cfg:     cfg,
		rdzv:    rdzv,
		signals: signals,
		policy: RestartPolicy{
			MaxRestarts:        cfg.MaxRestarts,
			NoRestartExitCodes: cfg.NoRestartExitCodes,
			Backoff:            cfg.RestartBackoff,
			BackoffMax:         cfg.RestartBackoffMax,
		},
		stdout: NewConsole(cfg.Stdout),
		stderr: NewConsole(cfg.Stderr),
	}, nil
}

// Run runs the job on this node until its workers succeed, fail with no
// restart left, or a stop signal or ctx ends it. When Run returns, every
// worker process and its process group are gone and their output has been
// written. An error means the agent itself could not go on (rendezvous,
// log directory, a worker that cannot be started); the Result still holds
// the exit code to use.
func (a *Agent) Run(ctx context.Context) (Result, error) {
	cfg := &a.cfg
	layout, err := newLogLayout(cfg.LogDir, cfg.RunID)
	if err != nil {
		return Result{ExitCode: 1}, err
	}
	defer func() {
		if err := layout.close(); err != nil {
			cfg.Log.Warnf("remove %s: %v", layout.root, err)
		}
	}()
	if layout.kept() {
		cfg.Log.Infof("worker logs in %s", layout.root)
	}
	shared, warnings := SharedEnv(cfg)
	for _, w := range warnings {
		cfg.Log.Warn(w)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := a.rdzv.Close(cctx); err != nil {
			cfg.Log.Warnf("leave rendezvous: %v", err)
		}
	}()

	node := rendezvous.Node{Addr: cfg.Hostname, LocalWorldSize: cfg.NprocPerNode, Role: cfg.Role}
	restarts := 0
	for {
		var round rendezvous.Round
		sig, err := a.interruptible(ctx, func(ctx context.Context) error {
			var err error
			round, err = a.rdzv.Next(ctx, node)
			return err
		})
		if sig != 0 {
			return Result{ExitCode: 128 + int(sig), Signal: sig, Restarts: restarts}, nil
		}
		if err != nil {
			return Result{ExitCode: 1, Restarts: restarts}, fmt.Errorf("rendezvous: %w", err)
		}
		if err := layout.prepareAttempt(restarts, cfg.NprocPerNode); err != nil {
			return Result{ExitCode: 1, Restarts: restarts}, err
		}
		n := restarts
		specs := PlanWorkers(cfg, shared, round, restarts, func(lr int) string { return layout.errorFile(n, lr) })
		cfg.Log.Debugf("round %d: group rank %d of %d, world size %d, master %s:%d", round.Number, round.GroupRank, round.GroupWorldSize, round.WorldSize, round.MasterAddr, round.MasterPort)
		att, err := startAttempt(cfg, restarts, specs, layout, a.stdout, a.stderr)
		if err != nil {
			code := 1
			var se *StartError
			if errors.As(err, &se) {
				code = se.ExitCode()
			}
			return Result{ExitCode: code, Restarts: restarts}, err
		}
		wctx, stopWatch := context.WithCancel(ctx)
		out := att.monitor(ctx, a.signals, a.rdzv.Watch(wctx, round))
		stopWatch()
		att.finish()

		res := Result{Restarts: restarts, Signal: out.signal}
		switch out.kind {
		case outcomeSucceeded:
			cfg.Log.Debugf("all %d workers succeeded", cfg.NprocPerNode)
			return res, nil
		case outcomeSignalled:
			res.ExitCode = 128 + int(out.signal)
			return res, nil
		case outcomeCancelled:
			res.ExitCode = 1
			return res, ctx.Err()
		case outcomeInterrupted:
			if !out.event.Failure {
				cfg.Log.Infof("restarting the workers for a membership change (not counted as a restart)")
				continue
			}
		}
		failures := att.completeFailures(out.failures, layout)
		codes := make([]int, len(failures))
		for i, f := range failures {
			codes[i] = f.ExitCode
		}
		d := a.policy.Decide(restarts, codes)
		if !d.Restart {
			if len(failures) > 0 {
				res.ExitCode = failures[0].ExitCode
				res.Failures = failures
				fmt.Fprint(cfg.Stderr, FormatSummary(cfg.Entrypoint.Script, failures))
			} else {
				res.ExitCode = 1
			}
			cfg.Log.Errorf("not restarting: %s", d.Reason)
			return res, nil
		}
		cfg.Log.Warnf("worker group failed; %s", d.Reason)
		if d.Delay > 0 {
			cfg.Log.Infof("waiting %v before restarting (--restart-backoff)", d.Delay)
			sig, err := a.interruptible(ctx, func(ctx context.Context) error { return sleep(ctx, d.Delay) })
			if sig != 0 {
				return Result{ExitCode: 128 + int(sig), Signal: sig, Restarts: restarts}, nil
			}
			if err != nil {
				return Result{ExitCode: 1, Restarts: restarts}, err
			}
		}
		restarts++
	}
}

// interruptible runs fn, which runs while no worker does (a rendezvous, a
// backoff), with a context that a stop signal cancels. It returns the stop
// signal if one came; forward-only signals are dropped, as there is no
// worker to forward them to.
func (a *Agent) interruptible(ctx context.Context, fn func(context.Context) error) (syscall.Signal, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		got  syscall.Signal
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case s := <-a.signals:
				if sig, ok := s.(syscall.Signal); ok && slices.Contains(a.cfg.StopSignals, sig) {
					got = sig
					a.cfg.Log.Warnf("received %s: stopping", SignalName(sig))
					cancel()
					return
				}
			case <-done:
				return
			}
		}
	}()
	err := fn(ctx)
	close(done)
	wg.Wait()
	if got != 0 {
		return got, nil
	}
	return 0, err
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
