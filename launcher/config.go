package launcher

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/internal/secret"
	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/rendezvous"
)

// Defaults of Config fields, named after the flags that set them.
const (
	// DefaultStopTimeout is the grace period between SIGTERM and SIGKILL,
	// torchrun's 30 s.
	DefaultStopTimeout = 30 * time.Second
	// DefaultRestartBackoffMax caps the exponential restart backoff.
	DefaultRestartBackoffMax = 5 * time.Minute
	// DefaultRole is torchrun's default --role.
	DefaultRole = "default"
	// DefaultRunID is torchrun's default --rdzv-id.
	DefaultRunID = "none"
	// DefaultPython is the interpreter used unless --python says otherwise.
	DefaultPython = "python3"
	// DefaultPrefixTemplate is the console prefix of each worker line:
	// role name and global rank, in torchrun's "[default0]:" shape.
	DefaultPrefixTemplate = "[${role_name}${rank}]:"
)

// Std selects a worker's streams: torchrun's --redirects / --tee values.
type Std int

// The Std values are a bit set, as in torchrun: 1 stdout, 2 stderr.
const (
	StdNone Std = 0
	StdOut  Std = 1
	StdErr  Std = 2
	StdAll  Std = 3
)

// Has reports whether s selects stream t (StdOut or StdErr).
func (s Std) Has(t Std) bool { return s&t != 0 }

// StdSpec is a per-local-rank Std: Default for every rank, overridden by
// PerRank.
type StdSpec struct {
	Default Std
	PerRank map[int]Std
}

// For returns the Std of localRank.
func (s StdSpec) For(localRank int) Std {
	if v, ok := s.PerRank[localRank]; ok {
		return v
	}
	return s.Default
}

// Any reports whether any rank selects any stream.
func (s StdSpec) Any() bool {
	if s.Default != StdNone {
		return true
	}
	for _, v := range s.PerRank {
		if v != StdNone {
			return true
		}
	}
	return false
}

// Entrypoint says how a worker runs the training script.
type Entrypoint struct {
	// Script is the script path, module name (Module) or binary (NoPython).
	Script string
	// Args reach the script unchanged.
	Args []string
	// Module runs `python -u -m Script`.
	Module bool
	// NoPython executes Script directly.
	NoPython bool
	// RunPath runs Script with runpy.run_path, as torchrun's --run-path.
	RunPath bool
	// Python is the interpreter (with any arguments of its own).
	Python []string
}

// Config is everything the agent needs to run one node's workers.
type Config struct {
	Entrypoint Entrypoint

	// NprocPerNode is the resolved number of workers on this node.
	NprocPerNode int
	// Role is the workers' role name (ROLE_NAME).
	Role string
	// RunID is the job id (TORCHELASTIC_RUN_ID): it names the run's log
	// folder and store keys, so no '/' (rendezvous.ValidateRunID).
	RunID string
	// JobSecret is the job's secret (GORUN_JOB_SECRET) when the
	// rendezvous gives none (Round.JobSecret); empty, NewAgent makes one.
	// Set it to share one secret with the job's other processes (the
	// --standalone store).
	JobSecret secret.Secret
	// Plan, when set, is the job's parallel layout (gorun --plan) at each
	// world size the job may run at: each round's world size gives its
	// data-parallel size and micro-batches per step, and every worker
	// gets the layout and its coordinates in GORUN_* variables.
	Plan *LayoutPlan

	// MaxRestarts is the number of restarts after a worker failure.
	MaxRestarts int
	// NoRestartExitCodes lists worker exit codes that are never retried.
	NoRestartExitCodes []int
	// RestartBackoff is the delay before the first restart; it doubles with
	// every further restart up to RestartBackoffMax. 0 restarts at once.
	RestartBackoff    time.Duration
	RestartBackoffMax time.Duration
	// StopTimeout is the grace period between SIGTERM and SIGKILL.
	StopTimeout time.Duration
	// WarmStart keeps one Python interpreter per local rank started, with
	// WarmImports imported, that the next (re)start of the rank runs the
	// script in (warm.go; --warm-start, --warm-imports).
	WarmStart   bool
	WarmImports []string
	// HangTimeout, when above 0, makes the attempt hung once no worker
	// showed a sign of life for that long (hang.go): gorun gathers every
	// rank's evidence, names the rank that held the others up, and stops
	// the attempt.
	HangTimeout time.Duration
	// WorkerProbe starts gorun's probe in Python workers (package probe;
	// --worker-probe): their stacks, steps and flight recorder, for
	// scripts that know nothing of gorun.
	WorkerProbe bool

	// ReportFile, when set, receives the goodput report as JSON when the
	// run ends (--report).
	ReportFile string

	// LogDir, when set, holds <run_id>_<random>/attempt_<n>/<local_rank>/ with the
	// redirected streams and each worker's error.json.
	LogDir string
	// Redirects sends a worker's streams to files only; Tee to files and
	// the console.
	Redirects StdSpec
	Tee       StdSpec
	// LocalRanksFilter, when not nil, lists the local ranks whose output
	// reaches the console.
	LocalRanksFilter []int
	// PrefixTemplate is the console line prefix; "" with NoPrefix set
	// prints lines as they are.
	PrefixTemplate string
	NoPrefix       bool
	// DuplicateStdoutFilters and DuplicateStderrFilters, when not nil
	// (torchrun 2.x's --duplicate-stdout-filters), copy the teed lines of
	// the console's ranks that hold any of them, prefixed, to
	// attempt_<n>/filtered_stdout.log (filtered_stderr.log), one file for
	// all local ranks.
	DuplicateStdoutFilters []string
	DuplicateStderrFilters []string

	// VirtualLocalRank gives every worker LOCAL_RANK=0 and only its own
	// GPU (torchrun 2.x's --virtual-local-rank): CUDA_VISIBLE_DEVICES is
	// the local rank's entry of the launcher's CUDA_VISIBLE_DEVICES (or
	// HIP_VISIBLE_DEVICES, then set too), or the local rank itself.
	VirtualLocalRank bool
	// NUMACPUs, when not nil, binds each local rank's worker to its CPUs
	// (torchrun 2.x's --numa-binding; NUMAProbe.Bind chooses them).
	NUMACPUs [][]int

	// MemoryDefaults adds the allocator defaults (docs/sources.md) to the worker
	// environment unless the user set them.
	MemoryDefaults bool

	// StopSignals are forwarded to the workers and then stop them;
	// ForwardSignals are only forwarded.
	StopSignals    []syscall.Signal
	ForwardSignals []syscall.Signal
	// QuitSignals also stop the workers as StopSignals do, though the
	// user's --signals-to-handle leaves them out: SIGQUIT, whose default
	// in a Go program is a dump of every goroutine and exit 2, where a
	// user who sends it wants the job to quit.
	QuitSignals []syscall.Signal
	// PreemptSignals ask the whole job to stop cleanly (a preemption, see
	// preempt.go) when PreemptGrace is above 0; they take precedence over
	// StopSignals and ForwardSignals. A second one stops at once.
	PreemptSignals []syscall.Signal
	// PreemptGrace bounds a clean stop: past it the workers are stopped
	// as for a stop signal. 0 turns coordinated preemption off.
	PreemptGrace time.Duration
	// PreemptWorkerSignal is sent to every worker on a stop request,
	// besides the stop file appearing; 0 sends none.
	PreemptWorkerSignal syscall.Signal

	// Environ is the launcher's environment, the base of every worker's.
	Environ []string
	// Hostname is reported in the failure summary.
	Hostname string
	// Stdout and Stderr receive the workers' console output and the
	// failure summary.
	Stdout, Stderr io.Writer
	// oneConsole: Stdout and Stderr are one file (NewAgent finds it): the
	// workers' two streams then share a pipe (onestream.go).
	oneConsole bool
	// signalRepeatWindow replaces signalRepeatWindow when set (tests
	// that send a second signal at once).
	signalRepeatWindow time.Duration
	// Stdin is what the workers read (gorun's own, as under torchrun;
	// stdin.go); nil: nothing (/dev/null).
	Stdin *os.File
	// Log receives the agent's own messages.
	Log logrus.FieldLogger
}

// NewConfig returns a Config with the defaults filled in and the process's
// own environment, streams and host name.
func NewConfig() Config {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return Config{
		Entrypoint:          Entrypoint{Python: []string{DefaultPython}},
		NprocPerNode:        1,
		Role:                DefaultRole,
		RunID:               DefaultRunID,
		RestartBackoffMax:   DefaultRestartBackoffMax,
		StopTimeout:         DefaultStopTimeout,
		PrefixTemplate:      DefaultPrefixTemplate,
		MemoryDefaults:      true,
		StopSignals:         []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT},
		ForwardSignals:      []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2},
		PreemptSignals:      []syscall.Signal{syscall.SIGTERM},
		PreemptGrace:        DefaultPreemptGrace,
		PreemptWorkerSignal: syscall.SIGTERM,
		Environ:             os.Environ(),
		Hostname:            host,
		Stdout:              os.Stdout,
		Stderr:              os.Stderr,
		Log:                 logrus.StandardLogger(),
	}
}

// Validate reports the first field that is out of range, naming it
// (internal/setting: the command line names the flag that sets it).
func (c *Config) Validate() error {
	e := c.Entrypoint
	switch {
	case e.Script == "":
		return fmt.Errorf("no training script given: usage: gorun [flags] SCRIPT [ARGS...]")
	case e.Module && e.NoPython:
		return setting.Errorf("%s and %s cannot be used together", setting.Name("Entrypoint.NoPython"), setting.Name("Entrypoint.Module"))
	case e.RunPath && e.Module:
		return setting.Errorf("%s and %s cannot be used together", setting.Name("Entrypoint.RunPath"), setting.Name("Entrypoint.Module"))
	case !e.NoPython && len(e.Python) == 0:
		return setting.Errorf("%s: empty interpreter", setting.Name("Entrypoint.Python"))
	case c.NprocPerNode < 1:
		return setting.Errorf("%s: %d workers, want at least 1", setting.Name("NprocPerNode"), c.NprocPerNode)
	case rendezvous.ValidateRunID(c.RunID) != nil:
		return rendezvous.ValidateRunID(c.RunID)
	case c.MaxRestarts < 0:
		return setting.Errorf("%s: %d, want 0 or more", setting.Name("MaxRestarts"), c.MaxRestarts)
	case c.RestartBackoff < 0:
		return setting.Errorf("%s: %v, want 0 or more", setting.Name("RestartBackoff"), c.RestartBackoff)
	case c.RestartBackoffMax < c.RestartBackoff:
		return setting.Errorf("%s: %v is below %s %v", setting.Name("RestartBackoffMax"), c.RestartBackoffMax, setting.Name("RestartBackoff"), c.RestartBackoff)
	case c.StopTimeout < 0:
		return setting.Errorf("%s: %v, want 0 or more", setting.Name("StopTimeout"), c.StopTimeout)
	case c.PreemptGrace < 0:
		return setting.Errorf("%s: %v, want 0 (off) or more", setting.Name("PreemptGrace"), c.PreemptGrace)
	case c.HangTimeout < 0:
		return setting.Errorf("%s: %v, want 0 (off) or more", setting.Name("HangTimeout"), c.HangTimeout)
	case c.WarmStart && !e.RunsPython():
		return setting.Errorf("%s keeps Python interpreters ready, and %s runs %s itself: drop one of them", setting.Name("WarmStart"), setting.Name("Entrypoint.NoPython"), e.Script)
	case !c.WarmStart && len(c.WarmImports) > 0:
		return setting.Errorf("%s %s: the modules are imported by %s's interpreters: add %s", setting.Name("WarmImports"), strings.Join(c.WarmImports, ","), setting.Name("WarmStart"), setting.Name("WarmStart"))
	case c.Stdout == nil || c.Stderr == nil || c.Log == nil:
		return fmt.Errorf("launcher: Stdout, Stderr and Log must be set")
	}
	for _, m := range c.WarmImports {
		if !isModuleName(m) {
			return setting.Errorf("%s: %q is not a module name: want names such as torch,numpy,torch.distributed, separated by commas", setting.Name("WarmImports"), m)
		}
	}
	// A local rank beyond this node's workers is taken, as torchrun
	// takes it: one launch line serves nodes of different sizes.
	for _, r := range c.LocalRanksFilter {
		if r < 0 {
			return setting.Errorf("%s: local rank %d; want local ranks from 0", setting.Name("LocalRanksFilter"), r)
		}
	}
	return nil
}

// cpusOf is the CPUs local rank lr is bound to; nil: not bound.
func (cfg *Config) cpusOf(lr int) []int {
	if lr < len(cfg.NUMACPUs) {
		return cfg.NUMACPUs[lr]
	}
	return nil
}

// stops says whether sig stops the workers (StopSignals, QuitSignals).
func (cfg *Config) stops(sig syscall.Signal) bool {
	return slices.Contains(cfg.StopSignals, sig) || slices.Contains(cfg.QuitSignals, sig)
}

// probes reports whether the workers get gorun's probe: with
// --worker-probe, for Python workers.
func (c *Config) probes() bool { return c.WorkerProbe && c.pythonWorkers() }

// pythonWorkers reports whether the workers run Python: they then get
// gorun's Python modules on their path (package pyhelpers).
func (c *Config) pythonWorkers() bool {
	return c.Entrypoint.RunsPython() || isPython(c.Entrypoint.Script)
}
