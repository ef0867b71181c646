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

	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/internal/sys/tempdir"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher/probe"
	"github.com/gorun-dev/gorun/launcher/pyhelpers"
	"github.com/gorun-dev/gorun/rendezvous"
)

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
	// Preempted is true when the job stopped cleanly on a stop request
	// (ExitCode is ExitPreempted).
	Preempted bool
}

// Agent runs one node's workers: rendezvous, start, monitor, restart.
type Agent struct {
	cfg     Config
	rdzv    Rendezvous
	signals <-chan os.Signal
	policy  RestartPolicy
	stdout  *Console
	stderr  *Console
	// sweep is the background sweep of abandoned temporary folders,
	// started once the first workers are forked.
	sweep *sweeper
	// group holds every worker's descendants; Run makes it (groupReady
	// delivers it) and closes it.
	group      *jobGroup
	groupReady chan *jobGroup
	// pre is coordinated preemption (nil when --preempt-grace is 0).
	pre *preemptor
	// events is this node's timeline (goodput.go), kept in the run's
	// folder with --log-dir.
	events *goodput.EventLog
	// warm holds the warm interpreters (nil without --warm-start).
	warm *warmPool
	// shortReported: the goodput's short form was printed (with the
	// failure summary).
	shortReported bool
}

// NewAgent validates cfg and returns an agent. signals delivers the signals
// the caller subscribed to (cfg.StopSignals and cfg.ForwardSignals); nil
// means none.
func NewAgent(cfg Config, rdzv Rendezvous, signals <-chan os.Signal) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.JobSecret.IsSet() {
		s, err := NewSecret()
		if err != nil {
			return nil, err
		}
		cfg.JobSecret = s
	}
	stdout, stderr := NewConsole(cfg.Stdout), NewConsole(cfg.Stderr)
	if cfg.oneConsole = sameOutput(cfg.Stdout, cfg.Stderr); cfg.oneConsole {
		stderr = stdout // one file: one lock, whole lines in order
	}
	return &Agent{
		cfg:     cfg,
		rdzv:    rdzv,
		signals: signals,
		policy: RestartPolicy{
			NoRestartExitCodes: cfg.NoRestartExitCodes,
			Backoff:            cfg.RestartBackoff,
			BackoffMax:         cfg.RestartBackoffMax,
		},
		stdout: stdout,
		stderr: stderr,
	}, nil
}

// logsTempPrefix names the folder of the logs of a run with --redirects
// or --tee and no --log-dir: kept when the run ends (as torchrun keeps its
// torchelastic_*), so never swept (it has no owner file).
const logsTempPrefix = tempdir.Prefix + "logs-"

// Run runs the job on this node until its workers succeed, fail with no
// restart left, or a stop signal or ctx ends it. When Run returns, every
// worker process and its process group are gone and their output has been
// written. An error means the agent itself could not go on (rendezvous,
// log directory, a worker that cannot be started); the Result still holds
// the exit code to use. Once its first workers are forked, Run also
// removes, in the background, the temporary folders that gorun processes
// of the same user left when they were killed (tempdir.Sweep).
func (a *Agent) Run(ctx context.Context) (Result, error) {
	cfg := &a.cfg
	madeLogDir := false
	if cfg.LogDir == "" && (cfg.Redirects.Any() || cfg.Tee.Any()) {
		// As torchrun: the files go to a new temporary folder, kept (its
		// torchelastic_*), named below with the run's folder.
		dir, err := os.MkdirTemp("", logsTempPrefix)
		if err != nil {
			return Result{ExitCode: 1}, fmt.Errorf("make a temporary folder for the workers' log files: %w", err)
		}
		cfg.LogDir, madeLogDir = dir, true
	}
	layout, err := newLogLayout(cfg.LogDir, cfg.RunID)
	if err != nil {
		return Result{ExitCode: 1}, err
	}
	defer func() {
		// The plain-stop mark is for the workers, all gone by now: a kept
		// run folder holds only the run's own files.
		if err := layout.clearPlainStop(); err != nil {
			cfg.Log.Warnf("remove the plain-stop mark: %v", err)
		}
		if err := layout.close(); err != nil {
			cfg.Log.Warnf("remove %s: %v", layout.root, err)
		}
	}()
	switch {
	case madeLogDir:
		// A folder the user did not name: said even at LOGLEVEL=WARNING.
		cfg.Log.Warnf("worker logs in %s (--redirects/--tee without --log-dir)", layout.root)
	case layout.kept():
		cfg.Log.Infof("worker logs in %s", layout.root)
	}
	closeEvents := a.openEvents(layout)
	res, err := a.run(ctx, layout)
	a.events.Record(goodput.Event{Kind: goodput.EventExit, Code: res.ExitCode})
	closeEvents()
	if res.ExitCode != 0 && !a.shortReported && a.spawned() {
		// An exit without the failure summary (the store lost, a round
		// that could not form after workers ran): the goodput of what ran.
		a.printShortReport()
	}
	a.writeReport()
	return res, err
}

// run is Run once the run's folder exists.
func (a *Agent) run(ctx context.Context, layout *logLayout) (Result, error) {
	cfg := &a.cfg
	defer a.stopSweep()
	// The job's cgroup and guardian are made while the rendezvous and
	// the log folders are: the first workers' forks need them.
	a.groupReady = make(chan *jobGroup, 1)
	go func() {
		v, _ := lookupEnv(cfg.Environ, EnvJobCgroup)
		a.groupReady <- newJobGroup(cfg.Log, v != "0")
	}()
	defer func() {
		if a.group == nil {
			a.group = <-a.groupReady
		}
		a.group.close()
		a.group = nil
	}()
	pctx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	a.pre = newPreemptor(pctx, cfg, a.rdzv, layout)
	if a.pre != nil {
		a.pre.events = a.events
	}
	defer a.pre.wait()
	shared, warnings := SharedEnv(cfg)
	shared = append(shared, a.pre.env()...)
	if cfg.pythonWorkers() {
		// gorun's Python modules (the helpers, and the probe's
		// sitecustomize) live in a private folder of their own in the
		// temporary folder (sticky), never in the run's folder: under a
		// --log-dir that others can write to, the run's folder could be
		// swapped for theirs between the install and a worker's start,
		// and their code run in the job.
		pdir, err := tempdir.New("python")
		if err != nil {
			return Result{ExitCode: 1}, fmt.Errorf("python modules: %w", err)
		}
		defer pdir.Remove()
		if err := pyhelpers.Install(pdir.Path()); err != nil {
			return Result{ExitCode: 1}, err
		}
		if cfg.probes() {
			if err := probe.Install(pdir.Path()); err != nil {
				return Result{ExitCode: 1}, err
			}
		}
		user, _ := lookupEnv(cfg.Environ, "PYTHONPATH")
		shared = append(shared, EnvVar{"PYTHONPATH", probe.PythonPath(pdir.Path(), user)})
	}
	timer, timerEnv, err := startFileTimer(pctx, cfg.Environ, cfg.Log.Warnf)
	if err != nil {
		return Result{ExitCode: 2}, err
	}
	defer timer.close()
	shared = append(shared, timerEnv...)
	warnings = append(warnings, secretWarnings(cfg)...)
	for _, w := range warnings {
		cfg.Log.Warn(w)
	}
	if cfg.WarmStart {
		// The first workers start warm too when the rendezvous takes
		// longer than the imports.
		a.group = <-a.groupReady
		a.warm = newWarmPool(cfg, a.group, shared)
		defer func() { a.warm.close() }()
		a.warm.fill(stdinRoutesOf(cfg.Stdin))
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := a.rdzv.Close(cctx); err != nil {
			cfg.Log.Warnf("leave rendezvous: %v", err)
		}
	}()

	node := rendezvous.Node{Addr: cfg.Hostname, LocalWorldSize: cfg.NprocPerNode, Role: cfg.Role}
	store, err := a.openWorkerStore(ctx)
	if err != nil {
		return Result{ExitCode: 1}, err
	}
	if store != nil {
		defer store.Wait()
		defer store.Close()
		node.MasterPort = store.Port()
	}
	restarts := 0
	for {
		var round rendezvous.Round
		a.events.Record(goodput.Event{Kind: goodput.EventRendezvous})
		sig, err := a.interruptible(ctx, true, func(ctx context.Context) error {
			var err error
			round, err = a.rdzv.Next(ctx, node)
			return err
		})
		if sig != 0 {
			return Result{ExitCode: 128 + int(sig), Signal: sig, Restarts: restarts}, nil
		}
		switch {
		case errors.Is(err, errPreemptedIdle), errors.Is(err, rendezvous.ErrPreempted):
			cfg.Log.Warnf("the job stopped on a stop request (%v): exiting %d (preempted)", err, ExitPreempted)
			return Result{ExitCode: ExitPreempted, Restarts: restarts, Preempted: true}, nil
		case errors.Is(err, rendezvous.ErrJobSucceeded):
			cfg.Log.Infof("the job already succeeded on the other nodes")
			return Result{Restarts: restarts}, nil
		case errors.Is(err, rendezvous.ErrJobFailed):
			return Result{ExitCode: jobExitCode(err), Restarts: restarts}, fmt.Errorf("the job failed on another node (%w)", err)
		case err != nil:
			what := "no next round"
			if !a.spawned() {
				what = "joining the job"
			}
			return Result{ExitCode: 1, Restarts: restarts}, fmt.Errorf("%s: %w", what, err)
		}
		restarts = round.RestartCount
		useWorkerStore(store, &round)
		if !round.SpareSince.IsZero() {
			a.events.Record(goodput.Event{Kind: goodput.EventRendezvous, Spare: true, Round: round.Number, Time: round.SpareSince})
		}
		res, again, err := a.runRound(ctx, round, layout, shared)
		if !again || err != nil {
			a.lingerForOtherNodes(ctx, store, round, res, err)
			return res, err
		}
	}
}

// jobExitCode is the exit code of a node whose job failed elsewhere
// (err wraps rendezvous.ErrJobFailed): the failing node's, so that every
// node exits alike; 1 when the job failed before any worker did.
func jobExitCode(err error) int {
	var jf *rendezvous.JobFailure
	if errors.As(err, &jf) && jf.ExitCode > 0 {
		return jf.ExitCode
	}
	return 1
}

// runRound runs one attempt of the workers in round and says whether the
// agent goes on to another round.
func (a *Agent) runRound(ctx context.Context, round rendezvous.Round, layout *logLayout, shared []EnvVar) (Result, bool, error) {
	res := Result{Restarts: round.RestartCount}
	att, dumps, err := a.startRound(ctx, round, layout, shared)
	if err != nil {
		res.ExitCode = 1
		var se *StartError
		if errors.As(err, &se) {
			res.ExitCode = se.ExitCode()
		}
		return res, false, err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	att.pre = a.pre
	if hv, ok := a.rdzv.(HangVoter); ok && a.cfg.HangTimeout > 0 && round.GroupWorldSize > 1 {
		att.job = &jobHang{voter: hv, round: round}
	}
	if lr, ok := a.rdzv.(LeftRankSharer); ok && round.GroupWorldSize > 1 {
		att.leftRec, att.round = lr, round
	}
	if as, ok := a.rdzv.(ArrivalSharer); ok && round.GroupWorldSize > 1 {
		att.arrivals = &nodeArrivalsSetup{sharer: as, round: round}
	}
	events := a.rdzv.Watch(wctx, round)
	out := att.monitor(ctx, a.signals, events)
	att.finish()
	// With the output in and the error files written: the root cause first.
	out.failures, out.left = att.completeFailures(out.failures, out.left, layout), nil
	att.records.Wait()
	out.failures = att.remoteLeft(ctx, out.failures)
	a.lostNode(&out, events)
	stopWatch()
	a.recordEnd(att, out)

	res.Signal = out.signal
	if a.pre.active() {
		if done, ok := a.endPreempted(ctx, round, att, out, layout, res); ok {
			return done, false, nil
		}
	}
	switch out.kind {
	case outcomeSucceeded:
		if err := layout.unrequestedStop(); err != nil {
			res.ExitCode = 1
			return res, false, err
		}
		return a.succeeded(ctx, round, res)
	case outcomeSignalled:
		res.ExitCode = 128 + int(out.signal)
		if a.pre.active() {
			// The stop request's escalation: said, so that the exit code
			// does not look like a clean preemption gone wrong.
			a.cfg.Log.Warnf("stopped by %s sent again after the stop request (%s): exiting %d", SignalName(out.signal), printable(a.pre.req.Reason), res.ExitCode)
		}
		return res, false, nil
	case outcomeCancelled:
		res.ExitCode = 1
		return res, false, ctx.Err()
	case outcomeInterrupted:
		// Another node's failure already spent the budget; a membership
		// change costs nothing. Either way: the next round, after this
		// node's part of the failed round's verdict.
		if out.event.Failure {
			a.reportFlightRecorders(ctx, round, dumps)
		}
		return res, true, nil
	}
	return a.failed(ctx, round, att, out, layout, dumps, res)
}

// startRound prepares the attempt's folders and the workers' environment
// and starts them; dumps is the flight recorders' folder.
func (a *Agent) startRound(ctx context.Context, round rendezvous.Round, layout *logLayout, shared []EnvVar) (att *attempt, dumps string, err error) {
	cfg := &a.cfg
	attemptN := round.RestartCount
	if err := layout.prepareAttempt(attemptN, cfg.NprocPerNode); err != nil {
		return nil, "", err
	}
	dumps, set := lookupEnv(cfg.Environ, workerenv.FlightRecorderDir)
	if !set || dumps == "" {
		var warning string
		if dumps, warning, err = layout.dumpDir(attemptN); err != nil {
			return nil, "", err
		}
		if warning != "" {
			cfg.Log.Warn(warning)
		}
		shared = append(slices.Clip(shared), EnvVar{workerenv.FlightRecorderDir, dumps})
	}
	workerRound := round
	if len(workerRound.JobSecret) == 0 {
		workerRound.JobSecret = cfg.JobSecret
	}
	specs, err := WorkerSpecs(cfg, shared, workerRound, attemptN, func(lr int) string { return layout.errorFile(attemptN, lr) })
	if err != nil {
		return nil, "", err
	}
	cfg.Log.Debugf("round %d: group rank %d of %d, world size %d, master %s:%d", round.Number, round.GroupRank, round.GroupWorldSize, round.WorldSize, round.MasterAddr, round.MasterPort)
	if a.group == nil {
		a.group = <-a.groupReady
	}
	a.pre.newAttempt()
	// The spawn is when the start began, before the forks and hand-overs
	// (a round's close to the spawn is the rendezvous's time).
	spawned := time.Now()
	att, err = startAttempt(cfg, attemptN, specs, layout, a.stdout, a.stderr, a.group, a.warm)
	if err != nil {
		return nil, "", err
	}
	att.onStraggler = func(s probe.Straggler, node string, recovered bool) {
		a.events.Record(goodput.Event{Kind: goodput.EventStraggler, Attempt: attemptN, Straggler: goodput.NewStragglerEvent(s, node, recovered)})
	}
	a.warm.fill(att.stdin) // the next (re)start's interpreters
	a.events.Record(goodput.Event{Kind: goodput.EventSpawn, Time: spawned, Attempt: attemptN, Round: round.Number, WorldSize: round.WorldSize})
	a.startSweep(ctx)
	return att, dumps, nil
}

// succeeded reports this node's success to the rendezvous: the job is
// done here, unless the round ended on another node (then it rejoins).
func (a *Agent) succeeded(ctx context.Context, round rendezvous.Round, res Result) (Result, bool, error) {
	var err error
	sig, _ := a.interruptible(ctx, false, func(ctx context.Context) error {
		err = a.rdzv.Succeed(ctx, round)
		return err
	})
	switch {
	case sig != 0:
		res.ExitCode, res.Signal = 128+int(sig), sig
		return res, false, nil
	case errors.Is(err, rendezvous.ErrRoundEnded):
		a.cfg.Log.Warnf("this node's workers succeeded, but the round ended on another node: rejoining")
		return res, true, nil
	case err != nil:
		res.ExitCode = 1
		return res, false, err
	}
	a.cfg.Log.Debugf("all %d workers succeeded", a.cfg.NprocPerNode)
	return res, false, nil
}

// failed reports the workers' failure to the rendezvous and, as the
// nodes agree, either ends the job (with its summary) or waits out the
// restart back-off and goes on.
func (a *Agent) failed(ctx context.Context, round rendezvous.Round, att *attempt, out outcome, layout *logLayout, dumps string, res Result) (Result, bool, error) {
	cfg := &a.cfg
	attemptN := round.RestartCount
	failures := out.failures
	codes := make([]int, len(failures))
	for i, f := range failures {
		codes[i] = f.ExitCode
	}
	retriable, why := a.policy.Retriable(codes)
	reason := "workers failed"
	if len(failures) > 0 {
		f := failures[0]
		reason = f.reason()
	}
	if a.pre.active() && retriable {
		retriable, why = false, "the job is stopping on a stop request ("+a.pre.req.Reason+")"
	}
	exitCode := jobFailureCode(failures)
	restart, err := a.rdzv.Fail(ctx, round, reason, exitCode, retriable)
	switch {
	case err == nil:
	case errors.Is(err, rendezvous.ErrJobFailed):
		why = fmt.Sprintf("the job failed on another node too (%v)", err)
	default:
		// Without the store no node can agree on a restart.
		cfg.Log.Errorf("report the failure to the rendezvous: %v", err)
		why = fmt.Sprintf("the job's store could not record the failure, so no restart can be agreed (%v)", err)
	}
	if !restart {
		res.ExitCode = exitCode
		if len(failures) > 0 {
			res.Failures = failures
			if err := writeRootCause(cfg.Environ, failures[0]); err != nil {
				cfg.Log.Warnf("%v", err)
			}
			fmt.Fprint(cfg.Stderr, FormatSummary(cfg.Entrypoint, failures))
			a.printShortReport()
		}
		a.reportFlightRecorders(ctx, round, dumps)
		if why == "" {
			why = fmt.Sprintf("no restarts left (%d of --max-restarts=%d used)", attemptN, cfg.MaxRestarts)
		}
		cfg.Log.Errorf("not restarting: %s", why)
		return res, false, nil
	}
	a.reportFlightRecorders(ctx, round, dumps)
	cfg.Log.Warnf("worker group failed; restart %d of %d", attemptN+1, cfg.MaxRestarts)
	if d := a.policy.Delay(attemptN); d > 0 {
		cfg.Log.Infof("waiting %v before restarting (--restart-backoff)", d)
		sig, err := a.interruptible(ctx, true, func(ctx context.Context) error { return ctxtime.Sleep(ctx, d) })
		if sig != 0 {
			res.ExitCode, res.Signal = 128+int(sig), sig
			return res, false, nil
		}
		if errors.Is(err, errPreemptedIdle) {
			cfg.Log.Warnf("stop requested during the restart backoff: exiting %d (preempted)", ExitPreempted)
			res.ExitCode, res.Preempted = ExitPreempted, true
			return res, false, nil
		}
		if err != nil {
			res.ExitCode = 1
			return res, false, err
		}
	}
	return res, true, nil
}

// interruptible runs fn, which runs while no worker does (a rendezvous, a
// backoff), with a context that a stop signal cancels. It returns the stop
// signal if one came; forward-only signals are dropped, as there is no
// worker to forward them to. With preemption on, a preempt signal is
// recorded as the job's stop request; when preemptible, it and the
// store's request also end fn, and errPreemptedIdle is returned (no
// worker runs, so there is nothing to save); otherwise (the wait for the
// job's outcome) fn goes on.
func (a *Agent) interruptible(ctx context.Context, preemptible bool, fn func(context.Context) error) (syscall.Signal, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		got       syscall.Signal
		preempted bool
		wg        sync.WaitGroup
		done      = make(chan struct{})
		pre       = a.pre
	)
	var requests <-chan rendezvous.StopRequest
	if preemptible {
		requests = pre.storeRequests()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case req, ok := <-requests:
				requests = nil
				if ok {
					pre.fromStore(req)
					preempted = true
					cancel()
					return
				}
			case s := <-a.signals:
				if sig, ok := s.(syscall.Signal); ok && pre.isPreemptSignal(sig) {
					pre.fromSignal(sig)
					if preemptible {
						if published := pre.ready(); published != nil {
							<-published
						}
						preempted = true
						cancel()
						return
					}
					continue
				}
				if sig, ok := s.(syscall.Signal); ok && a.cfg.stops(sig) {
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
	if preempted {
		return 0, errPreemptedIdle
	}
	return 0, err
}

// lostNodeWait bounds the wait, after a failure that says it lost a peer,
// for the round to end because a node was lost (the node's lease ends at
// once when its agent dies: its presence connection closes).
const lostNodeWait = 5 * time.Second

// lostNode turns a failure into the round's interruption when the failure
// said its rank lost a peer and the round then ended without a failure
// (a node was lost): the failure is the loss's consequence, not a
// failure of the job's own, and takes no restart from --max-restarts
// (torchrun's agents count a lost node's round as a membership change,
// not a restart, too). events is the round's watch.
func (a *Agent) lostNode(out *outcome, events <-chan rendezvous.Event) {
	if events == nil || out.kind != outcomeFailed || len(out.failures) == 0 || out.failures[0].lostPeer == "" || out.failures[0].Left != "" {
		return
	}
	ev := out.late
	if ev == nil {
		t := time.NewTimer(lostNodeWait)
		defer t.Stop()
		select {
		case e, ok := <-events:
			if ok {
				ev = &e
			}
		case <-t.C:
		}
	}
	if ev == nil || ev.Failure || ev.Reason == "" {
		return
	}
	f := out.failures[0]
	a.cfg.Log.Warnf("%s; rank %d's failure (%q) is its consequence: the round ends for the lost node, and no restart is counted", ev.Reason, f.Rank, f.lostPeer)
	out.kind, out.event = outcomeInterrupted, *ev
}
