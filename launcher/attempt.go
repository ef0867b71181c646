package launcher

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher/probe"
	"github.com/gorun-dev/gorun/rendezvous"
)

// outputDrainTimeout bounds the wait for a worker's output after its
// process group is gone; only a descendant that left the group (setsid)
// can hold the pipe open that long.
const outputDrainTimeout = 2 * time.Second

// worker is one started worker of an attempt.
type worker struct {
	spec  WorkerSpec
	proc  *process
	signs *lifeSigns // with --hang-timeout
	// leftAt is when the worker exited 0 while others of the attempt
	// still ran (zero: it did not).
	leftAt time.Time
	// judged: the hang watch named it the root cause; evidence: it got
	// the evidence signal. Its exit is then the stop's, not a failure.
	judged, evidence bool
	readers          []*os.File // pipe read ends, closed after draining
	files            []*os.File // log files
	logs             []string   // kept log files, for the summary
	// stopKilled: the stop sequence sent this worker SIGKILL, so a death
	// by SIGKILL is the stop's, not a failure.
	stopKilled bool
	// stderrTail is the end of the worker's stderr, to read why it
	// failed when it wrote no error file.
	stderrTail *outputTail
}

// wroteErrorFile reports whether the worker wrote its error file
// (TORCHELASTIC_ERROR_FILE, a new path for each attempt).
func (w *worker) wroteErrorFile() bool {
	rep, err := ReadErrorFile(w.spec.ErrorFile)
	return err == nil && rep != nil
}

// attempt is one start of the node's workers.
type attempt struct {
	cfg     *Config
	group   *jobGroup // keeps the workers' descendants from outliving gorun
	number  int
	workers []*worker
	byProc  map[*process]*worker
	exited  chan *process
	pumps   sync.WaitGroup
	// pre is the agent's coordinated preemption (nil when off).
	pre *preemptor
	// job is the attempt's part in the job-wide hang watch (nil: this
	// node judges alone).
	job *jobHang
	// leftRec records the workers that leave early for the other nodes
	// (nil: one node, or a rendezvous without a store); recording runs
	// in the background, owned by records.
	leftRec LeftRankSharer
	round   rendezvous.Round
	records sync.WaitGroup
	// arrivals is the attempt's part in the job-wide straggler watch (nil:
	// none).
	arrivals *nodeArrivalsSetup
	// stdin is what the workers read.
	stdin stdinRoutes
	// filtered are the files of --duplicate-stdout-filters and
	// --duplicate-stderr-filters (nil where off), by stream, and their
	// consoles.
	filtered        [2]*os.File
	filteredConsole [2]*Console
	// filteredSinks are the workers' streams into them.
	filteredSinks []*filteredLines
	// onStraggler hears of each rank the straggler watch names, and of
	// its recovery (nil: nobody listens).
	// (node: "" for a rank of this node's; else the straggling node, and
	// s.Rank -1). Called from the watch's goroutines too.
	onStraggler func(s probe.Straggler, node string, recovered bool)
}

// outcomeKind says how an attempt ended.
type outcomeKind int

const (
	outcomeSucceeded    outcomeKind = iota // every worker exited 0
	outcomeFailed                          // a worker failed on its own
	outcomeSignalled                       // the agent got a stop signal
	outcomeInterrupted                     // the rendezvous ended the round
	outcomeCancelled                       // the agent's context ended
	outcomeStopDeadline                    // a stop request's grace period ended
)

type outcome struct {
	kind outcomeKind
	// stoppedBySignal: workers ended by the stop request's signal (a
	// worker that does not handle it), not cleanly.
	stoppedBySignal bool
	failures        []Failure
	// late is the round's end that came while the workers stopped (nil:
	// none): a lost node, when a failure said it lost a peer.
	late *rendezvous.Event
	// left are the workers that exited 0 before the first failure while
	// the others ran (placeLeft decides where they go).
	left   []Failure
	signal syscall.Signal
	event  rendezvous.Event
}

// streamRoutes says where one stream of one worker goes.
type streamRoutes struct {
	index   int    // 0 for stdout, 1 for stderr
	name    string // "stdout" or "stderr"
	bit     Std
	console *Console
	// both: this stream's pipe is the worker's stderr too (onestream.go).
	both bool
}

// startAttempt starts every worker of specs: in the warm interpreter of
// its local rank where warm has one that may run it, else as a new
// process. If one cannot be started, the ones already running are killed
// and a *StartError is returned.
func startAttempt(cfg *Config, number int, specs []WorkerSpec, layout *logLayout, stdout, stderr *Console, group *jobGroup, warm *warmPool) (*attempt, error) {
	att := &attempt{
		cfg:    cfg,
		group:  group,
		number: number,
		byProc: make(map[*process]*worker, len(specs)),
		exited: make(chan *process, len(specs)),
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	defer devNull.Close()
	att.stdin = stdinRoutesOf(cfg.Stdin) // before plumbing: its reader shows prompts
	for j, filters := range [2][]string{cfg.DuplicateStdoutFilters, cfg.DuplicateStderrFilters} {
		if filters == nil {
			continue
		}
		f, err := layout.createAttemptFile(number, "filtered_"+[2]string{"stdout", "stderr"}[j]+".log")
		if err != nil {
			att.closeFiltered()
			return nil, fmt.Errorf("create the filtered %s log: %w", [2]string{"stdout", "stderr"}[j], err)
		}
		att.filtered[j], att.filteredConsole[j] = f, NewConsole(f)
	}
	// Plumb every worker first, then start them all at once: forks and
	// execs overlap instead of queueing one after another.
	childEnds := make([][2]*os.File, len(specs))
	interps := make([]*warmInterp, len(specs))
	for i, spec := range specs {
		w := &worker{spec: spec}
		if cfg.HangTimeout > 0 {
			hb, _ := lookupEnv(spec.Env, workerenv.HeartbeatFile)
			w.signs = newLifeSigns(hb, time.Now())
		}
		att.workers = append(att.workers, w)
		if _, fg := att.stdin.forRank(spec.LocalRank); !fg {
			interps[i] = warm.take(spec)
		}
		streams := []streamRoutes{{0, "stdout", StdOut, stdout, false}, {1, "stderr", StdErr, stderr, false}}
		if cfg.mergesStreams(spec.LocalRank) {
			streams = []streamRoutes{{0, "stdout", StdOut, stdout, true}}
		}
		for j, sp := range streams {
			var interpOut *os.File
			if interps[i] != nil {
				interpOut = interps[i].out[j]
			}
			end, err := att.plumb(w, sp, layout, devNull, interpOut)
			if err != nil {
				closeChildEnds(childEnds, devNull)
				warm.discardTaken(interps) // ends their pumps
				att.abort()
				return nil, err
			}
			childEnds[i][j] = end
		}
		if len(streams) == 1 {
			childEnds[i][1] = childEnds[i][0] // one pipe for both
		}
	}
	procs := make([]*process, len(specs))
	starts := make([]<-chan error, len(specs))
	ignored := cfg.workerIgnoredSignals()
	for i, spec := range specs {
		if s := interps[i]; s != nil {
			procs[i], starts[i] = s.proc, att.handOver(warm, s, spec)
			continue
		}
		in, fg := att.stdin.forRank(spec.LocalRank)
		files := procFiles{stdin: in, stdout: childEnds[i][0], stderr: childEnds[i][1], inGorunsGroup: fg}
		procs[i], starts[i] = startProcessIn(ignoringSignals(spec.Argv, ignored), spec.Env, files, att.exited, 0, group.cgroupFD(), cfg.cpusOf(spec.LocalRank))
	}
	var startErr error
	for i, w := range att.workers {
		if err := <-starts[i]; err != nil {
			if startErr == nil {
				startErr = &StartError{LocalRank: w.spec.LocalRank, Argv0: w.spec.Argv[0], Err: err}
			}
			continue
		}
		w.proc = procs[i]
		att.byProc[procs[i]] = w
		if interps[i] != nil {
			continue // the pool told the group at its fork
		}
		group.started(w.proc.Pid)
		if w.proc.CgroupErr != nil {
			group.noCgroup(w.proc.CgroupErr)
		}
	}
	closeChildEnds(childEnds, devNull) // the children hold their own copies
	if startErr != nil {
		att.abort()
		return nil, startErr
	}
	return att, nil
}

// handOver makes the warm interpreter s the worker of spec: its exit reaches the
// attempt as a worker's does. A hand-over that fails (the interpreter died
// meanwhile) is that worker's failure, seen when its exit is: a restart
// can help, unlike a program that cannot be started.
func (att *attempt) handOver(warm *warmPool, s *warmInterp, spec WorkerSpec) <-chan error {
	started := make(chan error, 1)
	warm.activate(s, spec)
	started <- nil
	go func() { att.exited <- <-s.exited }() // ends when the worker does
	att.cfg.Log.Debugf("local rank %d: warm start in pid %d", spec.LocalRank, s.proc.Pid)
	return started
}

// closeChildEnds closes the parent's copies of the children's ends of
// their output pipes.
func closeChildEnds(ends [][2]*os.File, devNull *os.File) {
	for _, pair := range ends {
		for j, f := range pair {
			if f != nil && f != devNull && (j == 0 || f != pair[0]) {
				f.Close()
			}
		}
	}
}

// plumb prepares one stream of w and returns the file the child writes
// to: /dev/null when the stream goes nowhere, else a pipe whose read end a
// pump copies to the console and/or the stream's log file. A warm
// worker's stream is the pipe its warm interpreter was started with (interpOut, its
// read end): it gets a pump whatever the stream's plan (nil: no file for
// the child).
func (att *attempt) plumb(w *worker, sp streamRoutes, layout *logLayout, devNull, interpOut *os.File) (*os.File, error) {
	cfg, lr := att.cfg, w.spec.LocalRank
	redirect, tee := cfg.Redirects.For(lr).Has(sp.bit), cfg.Tee.For(lr).Has(sp.bit)
	toFile := redirect || tee
	toConsole := (!redirect || tee) && (cfg.LocalRanksFilter == nil || slices.Contains(cfg.LocalRanksFilter, lr))
	keepTail := sp.name == "stderr" || sp.both // why it failed, for the summary
	if !toFile && !toConsole && !keepTail && w.signs == nil && interpOut == nil {
		return devNull, nil
	}
	var file *os.File
	if toFile {
		path := layout.streamFile(att.number, lr, sp.name)
		f, err := layout.createStream(att.number, lr, sp.name)
		if err != nil {
			return nil, fmt.Errorf("create worker log: %w", err)
		}
		file = f
		w.files = append(w.files, f)
		w.logs = append(w.logs, path)
	}
	r, wr := interpOut, (*os.File)(nil)
	if r == nil {
		var err error
		if r, wr, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("create pipe for local rank %d %s: %w", lr, sp.name, err)
		}
	}
	w.readers = append(w.readers, r)
	var console *Console
	prefix := ""
	if toConsole {
		console = sp.console
		if !cfg.NoPrefix {
			prefix = ExpandPrefix(cfg.PrefixTemplate, cfg.Role, lr, w.spec.Rank, cfg.Hostname)
		}
	}
	var sink io.Writer // stays a nil interface without a file
	if file != nil {
		sink = file
		// torchrun 2.x copies the filtered lines of the ranks it tails:
		// teed, and shown on the console.
		if dup := att.filteredConsole[sp.index]; dup != nil && tee && toConsole {
			filters := [2][]string{cfg.DuplicateStdoutFilters, cfg.DuplicateStderrFilters}[sp.index]
			fl := &filteredLines{out: dup, filters: filters, prefix: prefix}
			att.filteredSinks = append(att.filteredSinks, fl)
			sink = io.MultiWriter(file, fl)
		}
	}
	if keepTail {
		w.stderrTail = &outputTail{}
		sink = tailWriter{tail: w.stderrTail, file: sink}
	}
	var src io.Reader = r
	if w.signs != nil {
		src = lifeSignsReader{r: r, p: w.signs} // output is a sign of life
	}
	prompting := att.stdin.inGorunsGroup && lr == 0 && sp.name == "stdout"
	att.pumps.Add(1)
	go func() {
		defer att.pumps.Done()
		var err error
		if prompting {
			err = pumpPrompting(src, r, sink, console, prefix)
		} else {
			err = pump(src, sink, console, prefix)
		}
		if err != nil {
			cfg.Log.Warnf("local rank %d %s: %v", lr, sp.name, err)
		}
	}()
	return wr, nil
}

// abort kills whatever this attempt started and releases its files; used
// when the attempt cannot be started completely.
func (att *attempt) abort() {
	for _, w := range att.workers {
		if w.proc != nil {
			_ = w.proc.signalGroup(syscall.SIGKILL)
			<-w.proc.Done()
		}
	}
	att.finish()
}

// running returns the workers whose process has not been reaped.
func (att *attempt) running() []*worker {
	var out []*worker
	for _, w := range att.workers {
		if w.proc != nil && !w.proc.Exited() {
			out = append(out, w)
		}
	}
	return out
}

func (att *attempt) signalRunning(sig syscall.Signal) {
	for _, w := range att.running() {
		if sig == syscall.SIGKILL {
			w.stopKilled = true
		}
		if err := w.proc.signalGroup(sig); err != nil {
			att.cfg.Log.Warnf("local rank %d: %v", w.spec.LocalRank, err)
		}
	}
}

// monitor waits until every worker has exited and says why the attempt
// ended. It reacts to each exit, signal and rendezvous event the moment it
// arrives. The first failure, stop signal, event or cancellation starts
// the stop sequence: the signal (SIGTERM, or the stop signal received) to
// every worker's process group, then SIGKILL after the grace period. A
// second stop signal skips what is left of the grace period.
func (att *attempt) monitor(ctx context.Context, signals <-chan os.Signal, events <-chan rendezvous.Event) outcome {
	m := &monitoring{att: att, out: outcome{kind: outcomeSucceeded}}
	done := ctx.Done()
	life := att.lifeWatch()
	m.life = life
	kills := make(chan *worker, len(att.workers))
	if att.pre.active() {
		m.told() // the request came before these workers started
	}
	defer m.stopTimers(life)
	for left := len(att.workers); left > 0; {
		select {
		case p := <-att.exited:
			left--
			m.exited(p)
		case s := <-signals:
			m.signalled(s)
		case req, ok := <-att.pre.storeRequests():
			if !ok {
				att.pre.requests = nil
				continue
			}
			if !m.stopping {
				att.pre.fromStore(req)
				m.told()
			}
		case <-att.pre.ready():
			m.told()
		case <-m.deadline:
			m.deadline = nil
			if !m.stopping {
				m.out.kind = outcomeStopDeadline
				m.beginStop(att.pre.deadlineSignal())
			}
		case ev := <-events:
			events = nil
			if !m.stopping {
				m.out.kind, m.out.event = outcomeInterrupted, ev
				att.cfg.Log.Warnf("round ended: %s; stopping the workers", ev.Reason)
				m.beginStop(syscall.SIGTERM)
			} else {
				m.out.late = &ev // see Agent.lostNode
			}
		case now := <-life.tick():
			if !m.stopping {
				life.check(now)
			}
		case v := <-life.verdict():
			m.onHang(v, kills)
		case w := <-kills:
			if !w.proc.Exited() {
				att.cfg.Log.Warnf("local rank %d (pid %d) still running %v after its evidence signal: sending SIGKILL", w.spec.LocalRank, w.proc.Pid, evidenceGrace)
				_ = w.proc.signalGroup(syscall.SIGKILL)
			}
		case <-m.grace:
			m.grace = nil
			for _, w := range att.running() {
				att.cfg.Log.Warnf("local rank %d (pid %d) still running %v after %s: sending SIGKILL", w.spec.LocalRank, w.proc.Pid, att.cfg.StopTimeout, SignalName(m.sent))
			}
			att.signalRunning(syscall.SIGKILL)
		case <-done:
			done = nil
			if !m.stopping {
				m.out.kind = outcomeCancelled
				m.beginStop(syscall.SIGTERM)
			}
		}
	}
	return m.out
}

// monitoring is one monitor's state: the outcome so far and the stop
// sequence.
type monitoring struct {
	att  *attempt
	out  outcome
	life *lifeWatch // nil with neither --hang-timeout nor probes (lifeWatch)
	// stopping: the stop sequence began, with the signal sent; grace
	// fires at its SIGKILL.
	stopping bool
	sent     syscall.Signal
	timer    *time.Timer
	grace    <-chan time.Time
	// deadline fires at the end of a stop request's grace.
	deadlineTimer *time.Timer
	deadline      <-chan time.Time
}

// beginStop starts the stop sequence with sig, once.
func (m *monitoring) beginStop(sig syscall.Signal) {
	if m.stopping {
		return
	}
	m.stopping, m.sent = true, sig
	m.att.pre.plainStop()
	m.att.signalRunning(sig)
	m.timer = time.NewTimer(m.att.cfg.StopTimeout)
	m.grace = m.timer.C
}

// told tells the workers of the stop request and arms its deadline.
func (m *monitoring) told() {
	m.att.pre.tell(m.att)
	if m.deadlineTimer == nil {
		m.deadlineTimer, m.deadline = m.att.pre.deadlineTimer()
	}
}

// stopTimers releases the timers.
func (m *monitoring) stopTimers(life *lifeWatch) {
	if m.timer != nil {
		m.timer.Stop()
	}
	if m.deadlineTimer != nil {
		m.deadlineTimer.Stop()
	}
	life.stop()
}

// exited handles a worker's exit: a failure begins the stop.
func (m *monitoring) exited(p *process) {
	att, cfg := m.att, m.att.cfg
	w := att.byProc[p]
	// The worker's process tree does not outlive it.
	_ = p.signalGroup(syscall.SIGKILL)
	att.group.ended(p.Pid)
	st := p.status()
	// A worker ended by the stop's own signal did not fail, unless it had
	// written its error file (it was failing on its own when a failure
	// elsewhere stopped it); one that died of SIGKILL
	// the stop never sent it (killed from outside, or by the kernel's OOM
	// killer, before its exit was seen) did, even when it is seen after
	// the stop began.
	stoppedByUs := m.stopping && st.Signal == m.sent && m.sent != syscall.SIGKILL
	if st.Code == 0 && !m.stopping && m.out.kind == outcomeSucceeded {
		if len(att.running()) > 0 {
			w.leftAt = st.At // the others go on: see placeLeft
			att.recordLeft(w)
		} else {
			att.recordNodeDone(st.At) // other nodes' ranks may go on
		}
	}
	if w.judged || w.evidence {
		return // the hang's verdict already named it, or its stacks were asked for
	}
	if st.Code == 0 || (stoppedByUs && !(m.out.kind == outcomeFailed && w.wroteErrorFile())) || (st.Signal == syscall.SIGKILL && w.stopKilled) {
		return
	}
	if att.pre.stoppedByIt(st) {
		m.out.stoppedBySignal = true
		return
	}
	first := m.out.kind == outcomeSucceeded
	after := ""
	if first {
		// The workers that left before the first failure: whether they
		// caused it is read from its error text once the output is in.
		m.out.left = att.leftBefore(st.At)
		if len(m.out.left) > 0 {
			l := m.out.left[0]
			after = fmt.Sprintf(" (rank %d had exited 0 at %s, %v before, while the others ran)", l.Rank, l.Time.Format("15:04:05.000"), st.At.Sub(l.Time).Round(time.Millisecond))
		}
	}
	m.out.failures = append(m.out.failures, Failure{
		LocalRank: w.spec.LocalRank, Rank: w.spec.Rank, PID: p.Pid,
		ExitCode: st.Code, Signal: st.Signal, Time: st.At, Host: cfg.Hostname,
	})
	if first {
		m.out.kind = outcomeFailed
		cfg.Log.Errorf("worker failed: rank %d (local rank %d, pid %d) %s%s; stopping the other workers", w.spec.Rank, w.spec.LocalRank, p.Pid, describeExit(st), after)
		m.beginStop(syscall.SIGTERM)
	}
}

// signalled handles a signal to gorun: a preempt signal is a stop
// request, a stop signal stops the workers (a second one kills them),
// another is forwarded.
func (m *monitoring) signalled(s os.Signal) {
	att, cfg := m.att, m.att.cfg
	sig, ok := s.(syscall.Signal)
	if !ok {
		return
	}
	if att.pre.isPreemptSignal(sig) {
		att.pre.fromSignal(sig)
		return
	}
	if !cfg.stops(sig) {
		att.forward(sig)
		return
	}
	if m.stopping && m.out.kind == outcomeSignalled {
		cfg.Log.Warnf("received %s again: killing the workers now", SignalName(sig))
		att.signalRunning(syscall.SIGKILL)
		return
	}
	m.out.kind, m.out.signal = outcomeSignalled, sig
	cfg.Log.Warnf("received %s: forwarding it to the workers, SIGKILL in %v (send it again to kill at once)", SignalName(sig), cfg.StopTimeout)
	if m.stopping {
		att.signalRunning(sig)
	}
	m.beginStop(sig)
}

// finish waits for the workers' output to be copied, then closes pipes
// and files. Call it once every worker has exited.
func (att *attempt) finish() {
	att.group.killLeftovers()
	drained := make(chan struct{})
	go func() {
		att.pumps.Wait()
		close(drained)
	}()
	timer := time.NewTimer(outputDrainTimeout)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
		att.cfg.Log.Warnf("worker output still open %v after the workers exited (a descendant left the worker's process group); closing it", outputDrainTimeout)
	}
	for _, w := range att.workers {
		for _, r := range w.readers {
			r.Close()
		}
	}
	<-drained
	for _, fl := range att.filteredSinks {
		fl.flush() // a last line without a newline
	}
	att.closeFiltered()
	for _, w := range att.workers {
		for _, f := range w.files {
			if err := f.Close(); err != nil {
				att.cfg.Log.Warnf("worker log: %v", err)
			}
		}
	}
}

// completeFailures adds what the workers wrote to their error files and
// their log paths, and orders the failures by time: the root cause first.
func (att *attempt) completeFailures(failures, left []Failure, layout *logLayout) []Failure {
	byRank := make(map[int]*worker, len(att.workers))
	for _, w := range att.workers {
		byRank[w.spec.LocalRank] = w
	}
	for i := range failures {
		f := &failures[i]
		if f.remote {
			continue // a rank of another node, named by a job-wide verdict
		}
		w := byRank[f.LocalRank]
		f.errorFile = w.spec.ErrorFile
		if f.Left == "" && f.Hung == "" {
			f.LastLine = lastLine(w.stderrTail.String())
		}
		rep, err := ReadErrorFile(w.spec.ErrorFile)
		switch {
		case err != nil:
			f.ErrorFileProblem = err.Error()
		case rep != nil:
			f.Error = rep
			if layout.kept() {
				f.ErrorFile = w.spec.ErrorFile
			}
		}
		f.Logs = w.logs
	}
	tail := func(f Failure) string {
		if w := byRank[f.LocalRank]; w != nil && !f.remote {
			return w.stderrTail.String()
		}
		return ""
	}
	failures = orderFailures(failures, tail)
	return placeLeft(failures, left, tail)
}

// describeExit says how a process ended, for a log line.
func describeExit(st exitStatus) string {
	if st.Signal != 0 {
		return fmt.Sprintf("was killed by %s (exit code %d)", SignalName(st.Signal), st.Code)
	}
	return fmt.Sprintf("exited with code %d", st.Code)
}

// closeFiltered closes the files of the duplicate filters, once every
// pump that writes them has ended.
func (att *attempt) closeFiltered() {
	for j, f := range att.filtered {
		if f == nil {
			continue
		}
		if err := f.Close(); err != nil {
			att.cfg.Log.Warnf("filtered log: %v", err)
		}
		att.filtered[j], att.filteredConsole[j] = nil, nil
	}
}
