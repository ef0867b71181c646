package cmdline

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/storecmd"
)

// Flag categories, in the order --help shows them.
const (
	catWorkers    = "WORKERS"
	catRendezvous = "RENDEZVOUS"
	catRestarts   = "RESTARTS AND STOPPING"
	catLogging    = "LOGGING"
	catMemory     = "MEMORY"
)

// Flag names (dash spelling). The underscore spelling is an alias.
const (
	fNnodes          = "nnodes"
	fNprocPerNode    = "nproc-per-node"
	fRdzvBackend     = "rdzv-backend"
	fRdzvEndpoint    = "rdzv-endpoint"
	fRdzvID          = "rdzv-id"
	fRdzvConf        = "rdzv-conf"
	fStandalone      = "standalone"
	fMaxRestarts     = "max-restarts"
	fMonitorInterval = "monitor-interval"
	fStartMethod     = "start-method"
	fEventLogHandler = "event-log-handler"
	fRole            = "role"
	fModule          = "module"
	fNoPython        = "no-python"
	fRunPath         = "run-path"
	fLogDir          = "log-dir"
	fRedirects       = "redirects"
	fTee             = "tee"
	fLocalRanks      = "local-ranks-filter"
	fNodeRank        = "node-rank"
	fMasterAddr      = "master-addr"
	fMasterPort      = "master-port"
	fLocalAddr       = "local-addr"
	fScheduler       = "scheduler"
	fLogsSpecs       = "logs-specs"
	fNumaBinding     = "numa-binding"
	fSignals         = "signals-to-handle"
	fDupStdout       = "duplicate-stdout-filters"
	fDupStderr       = "duplicate-stderr-filters"
	fVirtualRank     = "virtual-local-rank"
	fShutdownTimeout = "shutdown-timeout"
	fCompletion      = "print-completion"

	fPython           = "python"
	fStopTimeout      = "stop-timeout"
	fPreemptSignal    = "preempt-signal"
	fPreemptGrace     = "preempt-grace"
	fPreemptWorkerSig = "preempt-worker-signal"
	fReport           = "report"
	fHangTimeout      = "hang-timeout"
	fWorkerProbe      = "worker-probe"
	fBackoff          = "restart-backoff"
	fBackoffMax       = "restart-backoff-max"
	fNoRestartCodes   = "no-restart-on-exit-codes"
	fPrefixTemplate   = "log-line-prefix-template"
	fNoPrefix         = "no-prefix"
	fNoMemoryDefaults = "no-memory-defaults"
	fWarmStart        = "warm-start"
	fWarmImports      = "warm-imports"
	fDryRun           = "dry-run"
	fPlan             = "plan"
	fFormat           = "format"
	fLogLevel         = "log-level"
)

// gorun plan's flags that library errors name (topology.Config's keys as
// flags).
const (
	fPlanGPU       = "gpu"
	fPlanGPUMemory = "gpu-memory"
)

// settingFlags is the flag that sets each setting the library packages'
// errors name (setting.Name: the field of launcher.Config,
// rendezvous.StaticConfig or Spec, topology.Config that holds it, or the
// parameter a function takes it as). The command line shows those errors
// with the flags (message), as the user typed them; the library never
// names a flag. TestSettingsNameFlags keeps it whole.
var settingFlags = map[setting.Name]string{
	// launcher.Config, and its Entrypoint.
	"Entrypoint.Module":   fModule,
	"Entrypoint.NoPython": fNoPython,
	"Entrypoint.RunPath":  fRunPath,
	"Entrypoint.Python":   fPython,
	"NprocPerNode":        fNprocPerNode,
	"MaxRestarts":         fMaxRestarts,
	"RestartBackoff":      fBackoff,
	"RestartBackoffMax":   fBackoffMax,
	"StopTimeout":         fStopTimeout,
	"PreemptGrace":        fPreemptGrace,
	"HangTimeout":         fHangTimeout,
	"WarmStart":           fWarmStart,
	"WarmImports":         fWarmImports,
	"LocalRanksFilter":    fLocalRanks,
	"LogDir":              fLogDir,
	"VirtualLocalRank":    fVirtualRank,
	"Plan":                fPlan,
	// launcher.NUMAProbe.Bind's mode.
	"NUMABinding": fNumaBinding,
	// rendezvous: the run id, the static and single-node backends'
	// configurations.
	"RunID":      fRdzvID,
	"NNodes":     fNnodes,
	"NodeRank":   fNodeRank,
	"MasterAddr": fMasterAddr,
	"MasterPort": fMasterPort,
	// rendezvous.Spec: the elastic backends' (a --rdzv-conf key is
	// Conf.<key>, shown as --rdzv-conf <key>: flagOf).
	"Backend": fRdzvBackend,
	// gorun store's --token-file (internal/storecmd).
	"TokenFile": storecmd.TokenFile,
	"Endpoint":  fRdzvEndpoint,
	"LocalAddr": fLocalAddr,
	"Conf":      fRdzvConf,
	// memory.DeviceMemory's preset: topology.Config's keys, gorun plan's
	// flags (a --plan file's keys gpu and gpu_memory).
	"GPU":       fPlanGPU,
	"GPUMemory": fPlanGPUMemory,
}

// flagOf is the flag that sets setting, as the user types it; "" when
// no flag does.
func flagOf(setting setting.Name) string {
	if f, ok := settingFlags[setting]; ok {
		return "--" + f
	}
	if key, ok := strings.CutPrefix(string(setting), confSetting); ok && key != "" {
		return "--" + fRdzvConf + " " + key
	}
	return ""
}

// confSetting begins the setting of a --rdzv-conf key (rendezvous.Spec's
// Conf, key by key).
const confSetting = "Conf."

// spelling returns the underscore alias of a dash flag name, if it differs.
func spelling(name string, short ...string) []string {
	aliases := append([]string{}, short...)
	if u := strings.ReplaceAll(name, "-", "_"); u != name {
		aliases = append(aliases, u)
	}
	return aliases
}

// envOf returns the environment variables a flag falls back to: GORUN_X,
// then torchrun's PET_X for torchrun's own flags, then extra names.
func envOf(name string, torchrun bool, extra ...string) []string {
	dest := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	env := []string{"GORUN_" + dest}
	if torchrun {
		env = append(env, "PET_"+dest)
	}
	return append(env, extra...)
}

// The launch flags are urfave flags whose names are computed once. A
// urfave flag's Names() runs a regular expression over each name at every
// call, and urfave calls it for every flag while it looks up each of the
// others (after parsing it checks every flag for an action, and an unset
// flag's lookup walks them all): about 16,000 allocations and 1 ms of a
// launch's 2 ms of parsing went there. The help text (String) is urfave's
// own, over the cached names.

// stringFlag is a cli.StringFlag with cached names.
type stringFlag struct {
	*cli.StringFlag
	names []string
}

// Names implements cli.Flag.
func (f *stringFlag) Names() []string { return f.names }

// String implements fmt.Stringer: the flag's help line.
func (f *stringFlag) String() string { return cli.FlagStringer(f) }

// boolFlag is a cli.BoolFlag with cached names.
type boolFlag struct {
	*cli.BoolFlag
	names []string
}

// Names implements cli.Flag.
func (f *boolFlag) Names() []string { return f.names }

// String implements fmt.Stringer: the flag's help line.
func (f *boolFlag) String() string { return cli.FlagStringer(f) }

// intFlag is a cli.IntFlag with cached names.
type intFlag struct {
	*cli.IntFlag
	names []string
}

// Names implements cli.Flag.
func (f *intFlag) Names() []string { return f.names }

// String implements fmt.Stringer: the flag's help line.
func (f *intFlag) String() string { return cli.FlagStringer(f) }

// float64Flag is a cli.Float64Flag with cached names.
type float64Flag struct {
	*cli.Float64Flag
	names []string
}

// Names implements cli.Flag.
func (f *float64Flag) Names() []string { return f.names }

// String implements fmt.Stringer: the flag's help line.
func (f *float64Flag) String() string { return cli.FlagStringer(f) }

// names is a flag's name and aliases, as urfave's FlagNames returns them
// for names without commas or spaces.
func names(name string, aliases []string) []string {
	return append([]string{name}, aliases...)
}

func str(cat, name, value, usage string, torchrun bool, short ...string) *stringFlag {
	a := spelling(name, short...)
	return &stringFlag{&cli.StringFlag{Name: name, Aliases: a, Value: value, Usage: usage, Category: cat, EnvVars: envOf(name, torchrun)}, names(name, a)}
}

func boolean(cat, name, usage string, torchrun bool, short ...string) *boolFlag {
	a := spelling(name, short...)
	return &boolFlag{&cli.BoolFlag{Name: name, Aliases: a, Usage: usage, Category: cat, EnvVars: envOf(name, torchrun)}, names(name, a)}
}

func integer(cat, name string, value int, usage string, torchrun bool) *intFlag {
	a := spelling(name)
	return &intFlag{&cli.IntFlag{Name: name, Aliases: a, Value: value, Usage: usage, Category: cat, EnvVars: envOf(name, torchrun)}, names(name, a)}
}

func float(cat, name string, value float64, usage string, torchrun bool) *float64Flag {
	a := spelling(name)
	return &float64Flag{&cli.Float64Flag{Name: name, Aliases: a, Value: value, Usage: usage, Category: cat, EnvVars: envOf(name, torchrun)}, names(name, a)}
}

// launchFlags are the flags of `gorun SCRIPT`: every torchrun flag, then
// gorun's own.
func launchFlags() []cli.Flag {
	python := str(catWorkers, fPython, "python3", "interpreter for the workers (run with -u); may include its own arguments", false)
	python.EnvVars = append(python.EnvVars, "PYTHON_EXEC")
	stop := str(catRestarts, fStopTimeout, "30s", "grace period between SIGTERM and SIGKILL when workers are stopped (a duration, or seconds); torchrun 2.x's --shutdown-timeout is the same flag", false)
	// torchrun 2.x's name for it; its variables after gorun's own.
	stop.Aliases = append(stop.Aliases, spelling(fShutdownTimeout, fShutdownTimeout)...)
	stop.names = names(stop.Name, stop.Aliases)
	stop.EnvVars = append(stop.EnvVars, "PET_SHUTDOWN_TIMEOUT", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT")
	prefix := str(catLogging, fPrefixTemplate, "[${role_name}${rank}]:", "console prefix of each worker line; placeholders ${role_name}, ${local_rank}, ${rank}, ${hostname}", false)
	prefix.EnvVars = append(prefix.EnvVars, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")
	// No variable: one left in the environment would turn every launch
	// into a completion script.
	completion := str(catLogging, fCompletion, "", "print a shell completion script for gorun's flags (bash, zsh or tcsh) and exit", false)
	completion.EnvVars = nil
	logLevel := str(catLogging, fLogLevel, "info", "gorun's own messages: debug, info, warning or error (else LOGLEVEL's, as torchrun: Python's level names and numbers)", false)

	return []cli.Flag{
		// Workers.
		str(catWorkers, fNprocPerNode, "1", "workers on this node: an integer, cpu, gpu, npu or auto (GPUs, else NPUs, else CPUs)", true),
		str(catWorkers, fRole, "default", "role name of the workers (ROLE_NAME)", true),
		boolean(catWorkers, fModule, "run SCRIPT as a module: python -u -m SCRIPT", true, "m"),
		boolean(catWorkers, fNoPython, "run SCRIPT directly, without the interpreter", true),
		boolean(catWorkers, fRunPath, "run SCRIPT with runpy.run_path, as torchrun --run-path", true),
		python,
		str(catWorkers, fStartMethod, "spawn", "spawn, fork or forkserver; accepted for torchrun compatibility (every worker is a fresh process)", true),
		str(catWorkers, fNumaBinding, "", "bind each worker to CPUs near the GPU of its local rank, as torchrun 2.x: node (its NUMA node's CPUs), socket (its socket's), exclusive (an equal share of its node's cores per GPU there) or core-complex (one last-level cache's CPUs per GPU)", false),
		boolean(catWorkers, fVirtualRank, "every worker gets LOCAL_RANK=0 and sees only its own GPU, as device 0 (CUDA_VISIBLE_DEVICES: the local rank's entry of yours, or the local rank)", true),
		boolean(catWorkers, fWarmStart, "keep one Python interpreter per local rank started, with --warm-imports imported, and start each (re)started worker in it: a restart does not pay the interpreter's start and imports again", false),
		str(catWorkers, fWarmImports, "", "modules --warm-start's interpreters import before their round, e.g. torch,numpy (default: torch)", false),
		boolean(catWorkers, fDryRun, "print each worker's rank, command line and the environment gorun adds; start nothing", false),
		str(catWorkers, fPlan, "", "a gorun plan file (YAML): validate its layout for this launch before any worker starts, and give each worker GORUN_TP/PP/VPP/CP/EP/DP, its coordinates and GORUN_NUM_MICROBATCHES; with --nnodes=MIN:MAX rounds run only at sizes the layout allows (DP and micro-batches follow), other nodes wait as hot spares", false),
		str(catWorkers, fFormat, "text", "output of --dry-run: text or json", false),

		// Rendezvous.
		str(catRendezvous, fNnodes, "1:1", "number of nodes, N or MIN:MAX", true),
		integer(catRendezvous, fNodeRank, 0, "this node's rank, for the static backend", true),
		str(catRendezvous, fRdzvBackend, "static", "rendezvous backend: static (fixed nodes, node 0 at --master-addr), c10d (elastic over etcd, embedded at --rdzv-endpoint: torchrun's lines as they are), embedded (the same, named for what it is), etcd or etcd-v2 (an external etcd at --rdzv-endpoint)", true),
		str(catRendezvous, fRdzvEndpoint, "", "rendezvous endpoint host[:port]", true),
		str(catRendezvous, fRdzvID, "none", "job id (TORCHELASTIC_RUN_ID)", true),
		str(catRendezvous, fRdzvConf, "", "backend settings k1=v1,k2=v2", true),
		boolean(catRendezvous, fStandalone, "single-node job with a fresh run id and a free master port", true),
		str(catRendezvous, fMasterAddr, "127.0.0.1", "address of worker rank 0's store", true),
		integer(catRendezvous, fMasterPort, 0, "port of worker rank 0's store; 0 picks a free port for a single-node job (29500 for static multi-node)", true),
		str(catRendezvous, fLocalAddr, "", "address this node advertises (default: host name)", true),
		str(catRendezvous, fScheduler, "auto", "take the job's shape from a cluster scheduler's environment where no flag gives it: auto (Slurm, else Kubernetes), slurm, kubernetes or none", false),

		// Restarts and stopping.
		integer(catRestarts, fMaxRestarts, 0, "restarts of all workers after a worker failure", true),
		str(catRestarts, fNoRestartCodes, "", "worker exit codes that are never retried, e.g. 2,3", false),
		str(catRestarts, fBackoff, "0", "delay before the first restart, doubled at each further one (0: restart at once)", false),
		str(catRestarts, fBackoffMax, "5m", "longest restart delay", false),
		stop,
		str(catRestarts, fHangTimeout, "0", "when no rank shows a sign of life for this long (output, a step, a collective, a moving stack, CPU time), the job is hung: gorun gathers every rank's stacks and flight recorder, names the rank that held the others up, stops the job and exits 124; a duration such as 5s or 10m; 0 is off", false),
		str(catRestarts, fWorkerProbe, "on", "on: Python workers load gorun's probe (first on PYTHONPATH, as sitecustomize), which reports their steps, stacks and PyTorch flight recorder for --hang-timeout's verdicts and the straggler watch; off: none", false),
		str(catRestarts, fSignals, "SIGTERM,SIGINT,SIGHUP,SIGQUIT", "signals forwarded to the workers that then stop them (SIGUSR1/SIGUSR2 are always forwarded)", true),
		str(catRestarts, fPreemptSignal, "SIGTERM", "signals that ask the whole job to stop cleanly (a preemption, e.g. SIGUSR1 for Slurm's --signal=B:USR1@120): every node's workers see GORUN_STOP_FILE appear, agree on a step, save and exit 0, and gorun exits 75; a second signal stops the workers at once", false),
		str(catRestarts, fPreemptGrace, "25s", "how long a clean stop may take before the workers are stopped as for a stop signal (exit 143); 0 turns coordinated preemption off (SIGTERM then stops at once, as torchrun does)", false),
		str(catRestarts, fPreemptWorkerSig, "SIGTERM", "signal sent to every worker on a stop request, besides GORUN_STOP_FILE appearing (GORUN_STOP_SIGNAL names it); none to send none", false),
		float(catRestarts, fMonitorInterval, 0.1, "accepted for torchrun compatibility; gorun sees every exit at once and does not poll", true),

		// Logging.
		str(catLogging, fLogDir, "", "keep worker files in DIR/<run_id>_<random>/attempt_<n>/<local_rank>/, and the run's timeline in DIR/<run_id>_<random>/events.jsonl (gorun report DIR)", true),
		str(catLogging, fReport, "", "write the goodput report (where wall time went: rendezvous, start-up, productive, lost to failures, preemption) to FILE as JSON when gorun ends", false),
		str(catLogging, fRedirects, "0", "send worker streams to files only: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank 0:3,1:2", true, "r"),
		str(catLogging, fTee, "0", "send worker streams to files and the console, same values as --redirects", true, "t"),
		str(catLogging, fLocalRanks, "", "local ranks whose output reaches the console, e.g. 0,3 (default: all)", true),
		str(catLogging, fDupStdout, "", "copy the teed stdout lines that hold any of these comma-separated strings (,, for a comma) to attempt_<n>/filtered_stdout.log in the run's folder", true),
		str(catLogging, fDupStderr, "", "the same for stderr: attempt_<n>/filtered_stderr.log", true),
		prefix,
		boolean(catLogging, fNoPrefix, "print worker lines without a prefix", false),
		str(catLogging, fLogsSpecs, "", "torchrun's LogsSpecs plugin: only torch's own, default, which is what gorun does; another is refused", false),
		str(catLogging, fEventLogHandler, "null", "torchrun's event log handler plugin; gorun has none and ignores it", true),
		logLevel,
		completion,

		// Memory.
		boolean(catMemory, fNoMemoryDefaults, "do not add expandable_segments:True to PYTORCH_CUDA_ALLOC_CONF nor MULTI_STREAM_MEMORY_REUSE=2", false),
	}
}
