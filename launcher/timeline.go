package launcher

import (
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/gorun-dev/gorun/launcher/probe"
)

// openEvents starts this node's timeline: in memory, and with --log-dir
// in <run folder>/events.jsonl too. The returned func closes the file.
func (a *Agent) openEvents(layout *logLayout) func() {
	cfg := &a.cfg
	closeFile := func() {}
	var f *os.File
	if layout.kept() {
		var err error
		f, err = layout.dir.OpenFile(goodput.EventsFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND|syscall.O_NOFOLLOW, fileMode)
		if err != nil {
			cfg.Log.Warnf("the run's timeline stays in memory only: %v", err)
		} else {
			closeFile = func() {
				if err := f.Close(); err != nil {
					cfg.Log.Warnf("close %s: %v", f.Name(), err)
				}
			}
		}
	}
	if f != nil {
		a.events = goodput.NewEventLog(f)
	} else {
		a.events = goodput.NewEventLog(nil)
	}
	a.events.Record(goodput.Event{Kind: goodput.EventStart, Node: cfg.Hostname, RunID: cfg.RunID})
	return func() {
		if err := a.events.Err(); err != nil {
			cfg.Log.Warnf("the run's timeline file is incomplete: %v", err)
		}
		closeFile()
	}
}

// recordEnd records how an attempt ended, with its workers' progress.
func (a *Agent) recordEnd(att *attempt, out outcome) {
	var ps []goodput.Progress
	for _, w := range att.workers {
		path, ok := lookupEnv(w.spec.Env, workerenv.ProgressFile)
		if !ok {
			continue
		}
		p, err := goodput.ReadProgress(path)
		if err != nil {
			a.cfg.Log.Debugf("progress of local rank %d: %v", w.spec.LocalRank, err)
			continue
		}
		ps = append(ps, p)
	}
	var probed []goodput.Progress
	var ckpt time.Time
	ckptStep := 0
	for _, w := range att.workers {
		path, ok := lookupEnv(w.spec.Env, workerenv.ProbeFile)
		if !ok {
			continue
		}
		s, ok, err := probe.Read(path)
		if err != nil || !ok {
			continue
		}
		// A script that knows nothing of gorun: the optimizer steps its
		// probe counted.
		probed = append(probed, goodput.ProbeProgress(s))
		if s.Saves > 0 && time.Unix(0, s.LastSaveNs).After(ckpt) {
			ckpt, ckptStep = time.Unix(0, s.LastSaveNs), int(s.StepsAtSave)
			if !s.StepHook {
				ckptStep = -1 // PyTorch 1.x: the steps are not counted
			}
		}
	}
	p, from := goodput.WorkersProgress(ps, probed)
	ev := goodput.Event{Kind: goodput.EventEnd, Attempt: att.number, How: endHow(out, a.pre.active())}
	switch out.kind {
	case outcomeFailed:
		if len(out.failures) > 0 {
			f := out.failures[0]
			ev.Reason = f.reason()
		}
	case outcomeInterrupted:
		ev.Reason = out.event.Reason
	case outcomeSucceeded:
		if out.stoppedBySignal {
			ev.Reason = "workers ended by " + SignalName(a.cfg.PreemptWorkerSignal) + " on a stop request, before they saved"
		}
	case outcomeSignalled:
		ev.Reason = "stopped by " + SignalName(out.signal)
	case outcomeStopDeadline:
		ev.Reason = "the stop request's grace period ended"
	}
	if p.Seen {
		ev.FirstProgress, ev.LastProgress, ev.Step, ev.FirstStep = p.FirstTime, p.Time, p.Step, p.FirstStep
	}
	ev.ProgressFrom, ev.Checkpoint, ev.CheckpointStep = from, ckpt, ckptStep
	a.events.Record(ev)
}

// reason is the failure in a few words, for the rendezvous and the
// timeline: "rank 1 on host7 exited with code 3".
func (f Failure) reason() string {
	switch {
	case f.Hung != "" && f.blameless:
		return fmt.Sprintf("a hang no rank can be blamed for (rank %d on %s stands for the job): %s", f.Rank, f.Host, f.Hung)
	case f.Hung != "":
		return fmt.Sprintf("rank %d on %s held the others up: %s", f.Rank, f.Host, f.Hung)
	case f.Left != "":
		return fmt.Sprintf("rank %d on %s %s", f.Rank, f.Host, f.Left)
	}
	return fmt.Sprintf("rank %d on %s %s", f.Rank, f.Host, describeExit(exitStatus{Code: f.ExitCode, Signal: f.Signal}))
}

// jobFailureCode is the exit code of the first failure that has one (a
// rank that left early exited 0).
func jobFailureCode(failures []Failure) int {
	for _, f := range failures {
		if f.ExitCode != 0 || f.Signal != 0 {
			return f.ExitCode
		}
	}
	return 1
}

// endHow names an attempt's end for the timeline.
func endHow(out outcome, stopRequested bool) string {
	switch out.kind {
	case outcomeSucceeded:
		if stopRequested {
			if out.stoppedBySignal {
				return goodput.EndStopped
			}
			return goodput.EndPreempted
		}
		return goodput.EndSucceeded
	case outcomeFailed:
		return goodput.EndFailed
	case outcomeInterrupted:
		if stopRequested {
			return goodput.EndStopped
		}
		return goodput.EndInterrupted
	}
	return goodput.EndStopped
}

// spawned says whether any workers were started.
func (a *Agent) spawned() bool {
	return slices.ContainsFunc(a.events.Events(), func(e goodput.Event) bool { return e.Kind == goodput.EventSpawn })
}

// report computes the goodput report of this node's timeline so far.
func (a *Agent) report() (goodput.Report, error) {
	return goodput.ComputeReport(a.events.Events(), time.Now(), nil)
}

// printShortReport adds the goodput report's short form to the failure
// summary.
func (a *Agent) printShortReport() {
	a.shortReported = true
	r, err := a.report()
	if err != nil {
		a.cfg.Log.Warnf("goodput report: %v", err)
		return
	}
	fmt.Fprintln(a.cfg.Stderr, r.Short())
}

// writeReport writes the goodput report as JSON to --report FILE.
func (a *Agent) writeReport() {
	cfg := &a.cfg
	if cfg.ReportFile == "" {
		return
	}
	r, err := a.report()
	if err == nil {
		err = writeReportFile(cfg.ReportFile, r)
	}
	if err != nil {
		cfg.Log.Errorf("--report %s: %v", cfg.ReportFile, err)
	}
}

// writeReportFile writes r to path: a regular file of this user's, made
// (0600) when absent. A link, a FIFO (opened without blocking, so a
// planted one cannot hold gorun) or another user's file is refused.
func writeReportFile(path string, r goodput.Report) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, fileMode)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.Mode().IsRegular():
		return fmt.Errorf("not a regular file (%v)", st.Mode().Type())
	case ok && int(sys.Uid) != os.Geteuid():
		return fmt.Errorf("owned by uid %d, not this user: remove it or name another file", sys.Uid)
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if err := r.WriteJSON(f); err != nil {
		return err
	}
	return f.Close()
}
