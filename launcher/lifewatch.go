package launcher

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/proc"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher/probe"
	"github.com/gorun-dev/gorun/watchdog"
)

// ExitHung is gorun's exit code when --hang-timeout stopped the job: the
// code of timeout(1), and of a worker whose collective timed out
// (watchdog.ExitCollectiveTimeout).
const ExitHung = watchdog.ExitCollectiveTimeout

// evidenceWait bounds the wait for the probes' stacks and flight
// recorders once the job is judged hung.
const evidenceWait = 5 * time.Second

// lifeWatch judges an attempt hung when none of its running workers has
// shown a sign of life (see life) for the timeout: a rank that computes,
// or waits in a collective that another is still computing towards, is
// never the hung one, and a job where only rank 0 prints is not hung.
// It then asks every probe for its evidence and judges who held the
// others up (probe.Judge), off the monitor's goroutine. Its methods
// accept a nil watch (no --hang-timeout).
type lifeWatch struct {
	att      *attempt
	timeout  time.Duration     // 0: the straggler watch alone
	strag    *probe.Stragglers // nil without probes
	ticker   *time.Ticker
	lives    []*life
	judging  bool
	deferred bool // said once that other nodes' ranks decide
	verdicts chan hangVerdict
	// ctx ends with stop: every goroutine of the watch runs under it, and
	// wg owns them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kills  []*time.Timer
	// job and votes: the job-wide watch over several nodes (nil: this
	// node judges alone).
	job   *jobHang
	votes chan voteState
	// nodes is the job-wide straggler watch (nil: this node's ranks are
	// compared with each other only).
	nodes *nodeWatch
}

// hangVerdict is what the judging found.
type hangVerdict struct {
	probe.Verdict
	answered map[int]bool // local ranks whose probe wrote its evidence
	idle     string       // how long nothing moved, in words
	// remote are the root ranks as failures, with the host they ran on:
	// those on other nodes lead this node's summary (job-wide verdicts).
	remote []Failure
}

func (att *attempt) lifeWatch() *lifeWatch {
	probes := att.cfg.probes()
	if att.cfg.HangTimeout <= 0 && !probes {
		return nil
	}
	now := time.Now()
	h := &lifeWatch{att: att, timeout: att.cfg.HangTimeout, verdicts: make(chan hangVerdict, 1)}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	var ranks []int
	for _, w := range att.workers {
		out := w.signs
		if out == nil {
			out = newLifeSigns("", now)
		}
		h.lives = append(h.lives, newLife(w.spec, out, now))
		ranks = append(ranks, w.spec.Rank)
	}
	every := probe.Interval(0)
	if h.timeout > 0 {
		every = min(max(h.timeout/10, 10*time.Millisecond), time.Second)
	}
	if probes {
		h.strag = probe.NewStragglers(ranks)
	}
	h.ticker = time.NewTicker(every)
	if att.job != nil && h.timeout > 0 && att.job.round.GroupWorldSize > 1 {
		h.startVoting(att.job)
	}
	if as := att.arrivals; as != nil && probes && as.round.GroupWorldSize > 1 {
		h.nodes = newNodeWatch(as.sharer, as.round, att.cfg.Hostname, now)
		h.nodes.start(h.ctx, h)
	}
	return h
}

func (h *lifeWatch) tick() <-chan time.Time {
	if h == nil {
		return nil
	}
	return h.ticker.C
}

func (h *lifeWatch) verdict() <-chan hangVerdict {
	if h == nil {
		return nil
	}
	return h.verdicts
}

// stop ends the ticker, the judging and the pending kills.
func (h *lifeWatch) stop() {
	if h == nil {
		return
	}
	h.ticker.Stop()
	h.cancel()
	h.wg.Wait()
	for _, t := range h.kills {
		t.Stop()
	}
}

// check reads every running worker's signs of life and, when none showed
// one for the timeout, starts the judging.
func (h *lifeWatch) check(now time.Time) {
	if h.judging {
		return
	}
	att := h.att
	running, alive := 0, false
	var snaps []probe.Snapshot
	var cpus map[int]time.Duration
	if h.timeout > 0 {
		var pids []int
		for _, w := range att.workers {
			if w.proc != nil && !w.proc.Exited() {
				pids = append(pids, w.proc.Pid)
			}
		}
		cpus, _ = proc.TreeCPUTimes(pids)
	}
	for i, w := range att.workers {
		if w.proc == nil || w.proc.Exited() {
			continue
		}
		running++
		h.lives[i].update(w.proc.Pid, now, cpus[w.proc.Pid])
		if now.Sub(h.lives[i].last) <= h.timeout {
			alive = true
		}
		if s := h.lives[i].snapshot(); s != nil {
			if h.strag != nil {
				h.strag.Observe(*s)
			}
			snaps = append(snaps, *s)
		}
	}
	if h.nodes != nil {
		h.nodes.sample(now, snaps)
	}
	h.checkStragglers()
	if h.job != nil {
		st := voteState{quiet: h.timeout > 0 && running > 0 && !alive, ranks: h.exitedRanks()}
		if st.quiet {
			st.cause = h.localCause()
		}
		h.sendVote(st)
		return
	}
	if h.timeout <= 0 || running == 0 || alive {
		return
	}
	if !h.localVerdict() {
		if !h.deferred {
			h.deferred = true
			att.cfg.Log.Warnf("hang watch: no rank of this node showed a sign of life for %v, but each waits in a collective for ranks on other nodes: their nodes judge", h.timeout)
		}
		return
	}
	h.judging = true
	ranks := h.exitedRanks()
	idle := fmt.Sprintf("no rank showed a sign of life for %v (--hang-timeout)", h.timeout)
	h.wg.Go(func() { h.judge(h.ctx, ranks, idle) })
}

// checkStragglers logs the ranks the straggler watch names or clears,
// and records them for the goodput report.
func (h *lifeWatch) checkStragglers() {
	if h.strag == nil {
		return
	}
	named, recovered := h.strag.Check()
	for _, s := range named {
		h.att.cfg.Log.Warnf("straggler watch: %s", s)
		if h.att.onStraggler != nil {
			h.att.onStraggler(s, "", false)
		}
	}
	for _, s := range recovered {
		h.att.cfg.Log.Infof("straggler watch: rank %d no longer enters collectives last", s.Rank)
		if h.att.onStraggler != nil {
			h.att.onStraggler(s, "", true)
		}
	}
}

// localVerdict reports whether this node may judge: it runs every rank
// of the job, or its own ranks show the cause (localCause).
func (h *lifeWatch) localVerdict() bool {
	world := 0
	if len(h.att.workers) > 0 {
		world, _ = strconv.Atoi(envOf(h.att.workers[0].spec, workerenv.WorldSize))
	}
	return world <= len(h.att.workers) || h.localCause() != ""
}

// localCause says which of this node's ranks left, or is outside any
// collective while another of its ranks waits in one (the others' nodes
// wait for it), or "". A node whose ranks are all outside collectives
// cannot tell that anyone waits: the vote decides.
func (h *lifeWatch) localCause() string {
	outside, waiting := -1, false
	for i, w := range h.att.workers {
		if !w.leftAt.IsZero() {
			return fmt.Sprintf("rank %d exited 0 at %s while the others ran", w.spec.Rank, w.leftAt.Format("15:04:05.000"))
		}
		s := h.lives[i].snapshot()
		if s == nil {
			continue
		}
		if _, in := s.InFlight(); in || s.Where() != "" {
			waiting = true
		} else if outside < 0 {
			outside = w.spec.Rank
		}
	}
	if outside >= 0 && waiting {
		return fmt.Sprintf("rank %d is outside any collective while the others wait", outside)
	}
	return ""
}

func envOf(spec WorkerSpec, name string) string {
	v, _ := lookupEnv(spec.Env, name)
	return v
}

// judge asks every probe for its evidence, waits for it (evidenceWait at
// most), and sends the verdict.
func (h *lifeWatch) judge(ctx context.Context, ranks []probe.Rank, idle string) {
	ev := h.gather(ctx, "hang-"+strconv.FormatInt(time.Now().UnixNano(), 10), ranks)
	if ctx.Err() != nil {
		return
	}
	v := hangVerdict{Verdict: probe.Judge(ev.ranks, ev.dumps), answered: ev.answered, idle: idle}
	select {
	case h.verdicts <- v:
	case <-ctx.Done():
	}
}

// localEvidence is what this node's probes and dumps show.
type localEvidence struct {
	ranks    []probe.Rank // by worker, with their snapshots
	answered map[int]bool // local ranks whose probe served the request
	dumps    []watchdog.Dump
}

// gather asks every probe for its evidence under request id and waits for
// it (evidenceWait at most); ranks are the attempt's, by worker.
func (h *lifeWatch) gather(ctx context.Context, id string, ranks []probe.Rank) localEvidence {
	att := h.att
	answered := map[int]bool{}
	var files map[int]string // local rank: snapshot file
	requested := false
	for _, w := range att.workers {
		f := envOf(w.spec, workerenv.ProbeFile)
		if f == "" {
			continue
		}
		if files == nil {
			files = map[int]string{}
		}
		files[w.spec.LocalRank] = f
		if req := envOf(w.spec, workerenv.ProbeRequest); req != "" && !requested {
			if err := probe.Request(req, id); err != nil {
				att.cfg.Log.Warnf("hang watch: %v", err)
			}
			requested = true
		}
	}
	snaps := map[int]*probe.Snapshot{}
	probed := maps.Clone(files)
	deadline := time.NewTimer(evidenceWait)
	defer deadline.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for len(files) > 0 {
		for lr, f := range files {
			if s, ok, err := probe.Read(f); err == nil && ok {
				snaps[lr] = &s
				if s.Dumped == id {
					answered[lr] = true
				}
			}
		}
		if len(answered) == len(files) {
			break
		}
		select {
		case <-ctx.Done():
			return localEvidence{ranks: ranks, answered: answered}
		case <-deadline.C:
			files = nil
		case <-poll.C:
		}
	}
	var dumps []watchdog.Dump
	if dir := envOf(att.workers[0].spec, workerenv.FlightRecorderDir); dir != "" {
		dumps, _ = watchdog.ReadDumps(dir)
	}
	for i, w := range att.workers {
		ranks[i].Snapshot = snaps[w.spec.LocalRank]
		ranks[i].Stale = probed[w.spec.LocalRank] != "" && !answered[w.spec.LocalRank]
	}
	return localEvidence{ranks: ranks, answered: answered, dumps: dumps}
}

// onHang stops a hung attempt with the verdict: the rank that held the
// others up is the root cause (exit code ExitHung); a worker whose probe
// did not answer gets its evidence signal first (its stacks then go to
// its output), the others SIGTERM.
func (m *monitoring) onHang(v hangVerdict, kills chan<- *worker) {
	att, cfg := m.att, m.att.cfg
	if m.stopping {
		return
	}
	cfg.Log.Errorf("hang: %s; what holds the job:", v.idle)
	for _, l := range v.Lines {
		cfg.Log.Errorf("hang:   %s", l)
	}
	text := strings.Join(v.Lines, "; ")
	now := time.Now()
	local := func(w *worker, blameless bool) Failure {
		pid := 0
		if w.proc != nil {
			pid = w.proc.Pid
		}
		w.judged = true
		return Failure{LocalRank: w.spec.LocalRank, Rank: w.spec.Rank, PID: pid, ExitCode: ExitHung, Time: now, Host: cfg.Hostname,
			Hung: v.idle + ": " + text, blameless: blameless}
	}
	// The root ranks in rank order, wherever they ran: every node's
	// summary leads with the same one.
	for _, r := range slices.Compact(slices.Sorted(slices.Values(v.Root))) {
		if i := slices.IndexFunc(att.workers, func(w *worker) bool { return w.spec.Rank == r }); i >= 0 {
			m.out.failures = append(m.out.failures, local(att.workers[i], false))
			continue
		}
		if i := slices.IndexFunc(v.remote, func(f Failure) bool { return f.Rank == r }); i >= 0 {
			f := v.remote[i]
			f.Time, f.Hung = now, v.idle+": "+text
			m.out.failures = append(m.out.failures, f)
		}
	}
	if len(m.out.failures) == 0 {
		// Nobody to blame that gorun can see: the lowest running rank
		// carries the verdict, and the summary says so.
		if r := att.running(); len(r) > 0 {
			m.out.failures = append(m.out.failures, local(r[0], true))
		}
	}
	m.out.kind = outcomeFailed
	sig := evidenceSignal(cfg.Entrypoint)
	m.stopping, m.sent = true, syscall.SIGTERM
	m.att.pre.plainStop()
	for _, w := range att.running() {
		if sig != 0 && !v.answered[w.spec.LocalRank] {
			w.evidence = true
			cfg.Log.Errorf("local rank %d (rank %d, pid %d): sending %s for its stacks, which go to its output", w.spec.LocalRank, w.spec.Rank, w.proc.Pid, SignalName(sig))
			_ = w.proc.signal(sig)
			m.life.kills = append(m.life.kills, time.AfterFunc(evidenceGrace, func() { kills <- w }))
			continue
		}
		if err := w.proc.signalGroup(syscall.SIGTERM); err != nil {
			cfg.Log.Warnf("local rank %d: %v", w.spec.LocalRank, err)
		}
	}
	m.timer = time.NewTimer(cfg.StopTimeout)
	m.grace = m.timer.C
}
