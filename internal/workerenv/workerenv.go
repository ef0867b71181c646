// Package workerenv is the contract between gorun's agent and its
// workers: the names of the GORUN_* variables that the agent
// (package launcher) sets for each worker and that the worker side
// (package comm, and any program run under gorun) reads. Each name is
// declared here once; comm's *Env constants are these, as the API Go
// workers read them by.
//
// torchrun's own variables (RANK, WORLD_SIZE, MASTER_ADDR, ...), which
// gorun sets the same way, and PyTorch's that the agent sets, are spelled
// here too (torchrun.go), and so are the Python probe's (GORUN_PROBE_*:
// probe.go). The values' forms are here as well: the stop and ignored
// signals (signals.go), a progress file's line (progress.go).
package workerenv

// The variables the agent sets for each worker.
const (
	// JobSecret is the job's secret: 64 hexadecimal digits (32 random
	// bytes), the same on every rank. The worker store and the CPU
	// backend's mesh admit only connections that prove they know it
	// (docs/comm.md); it never crosses the wire.
	JobSecret = "GORUN_JOB_SECRET"
	// StoreEndpoints, StorePrefix, StoreUser and StorePassword lead the
	// workers to the job's key-value store (an embedded etcd), where they
	// exist: its client addresses (comma-separated), the prefix of the
	// job's keys, and the user and password to log in with.
	StoreEndpoints = "GORUN_STORE_ENDPOINTS"
	StorePrefix    = "GORUN_STORE_PREFIX"
	StoreUser      = "GORUN_STORE_USER"
	StorePassword  = "GORUN_STORE_PASSWORD"
	// FlightRecorderDir is the folder where the workers dump their
	// flight recorders (one per attempt under the run's folder, unless
	// the user set it).
	FlightRecorderDir = "GORUN_FR_DUMP_DIR"
	// HeartbeatFile names a file that a worker touches to show progress
	// besides its output (with --hang-timeout).
	HeartbeatFile = "GORUN_HEARTBEAT_FILE"
	// ProgressFile names a file, one per worker, where the worker reports
	// its last step (ProgressLine has the form).
	ProgressFile = "GORUN_PROGRESS_FILE"
	// StopFile names a file, one per node, that does not exist at start:
	// gorun creates it when the job is asked to stop (SIGTERM to any
	// agent, Slurm's USR1, gorun stop RUN_ID).
	StopFile = "GORUN_STOP_FILE"
	// StopSignal names the signal, without "SIG" (TERM, USR1, ...), that
	// gorun also sends every worker then; empty or unset: none, only the
	// file appears.
	StopSignal = "GORUN_STOP_SIGNAL"
	// IgnoredSignals lists, comma-separated without "SIG", the signals
	// gorun starts the workers with ignored: a scheduler's stop requests
	// (Slurm's USR1), which gorun handles and passes on as StopFile's
	// file. Go installs its own handlers at start and cannot see the
	// inherited SIG_IGN: comm reads this instead.
	IgnoredSignals = "GORUN_IGNORED_SIGNALS"
)

// The layout the agent sets for each worker with --plan: the parallel
// sizes (Megatron's names: tensor, pipeline, virtual pipeline, context,
// expert, expert tensor, data and expert data parallel), their order,
// the worker's coordinates in each group, and the batch sizes that fit.
const (
	LayoutTP             = "GORUN_TP"
	LayoutPP             = "GORUN_PP"
	LayoutVPP            = "GORUN_VPP"
	LayoutCP             = "GORUN_CP"
	LayoutEP             = "GORUN_EP"
	LayoutETP            = "GORUN_ETP"
	LayoutDP             = "GORUN_DP"
	LayoutExpertDP       = "GORUN_EXPT_DP"
	LayoutOrder          = "GORUN_ORDER"
	LayoutTPRank         = "GORUN_TP_RANK"
	LayoutPPRank         = "GORUN_PP_RANK"
	LayoutDPRank         = "GORUN_DP_RANK"
	LayoutCPRank         = "GORUN_CP_RANK"
	LayoutEPRank         = "GORUN_EP_RANK"
	LayoutExpertTPRank   = "GORUN_EXPT_TP_RANK"
	LayoutExpertDPRank   = "GORUN_EXPT_DP_RANK"
	LayoutMicroBatchSize = "GORUN_MICRO_BATCH_SIZE"
	LayoutGlobalBatch    = "GORUN_GLOBAL_BATCH_SIZE"
	LayoutMicroBatches   = "GORUN_NUM_MICROBATCHES"
)
