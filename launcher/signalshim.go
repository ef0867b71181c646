package launcher

import (
	"os/exec"
	"slices"
	"strings"
	"syscall"

	"github.com/gorun-dev/gorun/internal/workerenv"
)

// A scheduler signals every process of a job, the workers included:
// Slurm's scancel --signal=USR1 and sbatch --signal=USR1@T deliver SIGUSR1
// to each process of the step, and a Python worker dies of SIGUSR1 before
// gorun has asked it to save. A preempt signal that gorun itself does not
// send its workers is therefore ignored in them: they start under a shell
// that sets it to SIG_IGN and then execs the worker (same pid, same
// process group), so that only gorun's own request (the stop file and
// --preempt-worker-signal) reaches them. A program that installs its own
// handler for that signal still gets it.

// workerIgnoredSignals are the signals the workers start with ignored:
// the preempt signals that are not stop signals (those stop the workers,
// as torchrun's do) nor the signal gorun sends on a stop request.
func (c *Config) workerIgnoredSignals() []syscall.Signal {
	if c.PreemptGrace <= 0 {
		return nil
	}
	var out []syscall.Signal
	for _, s := range c.PreemptSignals {
		if s != c.PreemptWorkerSignal && !slices.Contains(c.StopSignals, s) && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// ignoringSignals returns argv run with sigs ignored: argv itself when
// there are none, or when argv[0] cannot be found (its start then fails
// with the usual error, naming it).
func ignoringSignals(argv []string, sigs []syscall.Signal) []string {
	if len(sigs) == 0 || len(argv) == 0 {
		return argv
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return argv
	}
	script := "trap '' " + strings.ReplaceAll(workerenv.FormatSignalList(sigs), ",", " ") + `; exec "$0" "$@"`
	return append([]string{"/bin/sh", "-c", script}, argv...)
}
