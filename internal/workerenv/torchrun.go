package workerenv

// torchrun's variables: the ones PyTorch's launcher sets for each worker
// (torch.distributed.run, docs/sources.md), which gorun sets the same way
// for every worker, and which the worker side (package comm) reads. They
// are torchrun's names and meanings, not gorun's; they are spelled here,
// once, so that who sets and who reads each is found in one place.
const (
	// LocalRank is the worker's rank on its node, 0..LOCAL_WORLD_SIZE-1.
	LocalRank = "LOCAL_RANK"
	// Rank is the worker's global rank, 0..WORLD_SIZE-1.
	Rank = "RANK"
	// GroupRank is the node's rank in the round (torchrun's group).
	GroupRank = "GROUP_RANK"
	// RoleRank is the worker's rank among the workers of its role.
	RoleRank = "ROLE_RANK"
	// RoleName is the worker's role (--role).
	RoleName = "ROLE_NAME"
	// LocalWorldSize is the node's worker count.
	LocalWorldSize = "LOCAL_WORLD_SIZE"
	// WorldSize is the job's worker count in the round.
	WorldSize = "WORLD_SIZE"
	// GroupWorldSize is the round's node count.
	GroupWorldSize = "GROUP_WORLD_SIZE"
	// RoleWorldSize is the worker count of the worker's role.
	RoleWorldSize = "ROLE_WORLD_SIZE"
	// MasterAddr and MasterPort are where the workers' store is served.
	MasterAddr = "MASTER_ADDR"
	MasterPort = "MASTER_PORT"
	// RestartCount is how many restarts the job spent before this round.
	RestartCount = "TORCHELASTIC_RESTART_COUNT"
	// MaxRestarts is the job's restart budget (--max-restarts).
	MaxRestarts = "TORCHELASTIC_MAX_RESTARTS"
	// RunID is the job's run id (--rdzv-id).
	RunID = "TORCHELASTIC_RUN_ID"
	// UseAgentStore is "True" when the agent serves the workers' store
	// at MASTER_PORT (torchrun 2.x), "False" when worker rank 0 does.
	UseAgentStore = "TORCHELASTIC_USE_AGENT_STORE"
	// ErrorFile is the file where a worker writes its error (torch's
	// @record), and where the launcher copies the root cause's.
	ErrorFile = "TORCHELASTIC_ERROR_FILE"
	// EnableFileTimer, set to 1 in the launcher's environment, asks for
	// torch 2.x's worker watchdog (a named pipe of timer requests), and
	// TimerFile is the pipe's path the workers get.
	EnableFileTimer = "TORCHELASTIC_ENABLE_FILE_TIMER"
	TimerFile       = "TORCHELASTIC_TIMER_FILE"
)

// PyTorch's variables that the agent sets for its workers where the user
// did not, as torchrun does or as gorun adds (docs/launcher.md), and that
// gorun's Go workers read under the same names.
const (
	// OMPNumThreads is set to 1 for several workers per node, as torchrun
	// sets it.
	OMPNumThreads = "OMP_NUM_THREADS"
	// SignalsToHandle lists the signals torch's own handler takes
	// (TORCHELASTIC_SIGNALS_TO_HANDLE), gorun's stop signals.
	SignalsToHandle = "TORCHELASTIC_SIGNALS_TO_HANDLE"
	// NCCLAsyncErrorHandling is ProcessGroupNCCL's error handling;
	// NCCLAsyncErrorHandlingOld its name before torch 2.2.
	NCCLAsyncErrorHandling    = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
	NCCLAsyncErrorHandlingOld = "NCCL_ASYNC_ERROR_HANDLING"
	// FlightRecorderSize is the flight recorder's entries
	// (TORCH_FR_BUFFER_SIZE); NCCLTraceBufferSize its older name.
	FlightRecorderSize  = "TORCH_FR_BUFFER_SIZE"
	NCCLTraceBufferSize = "TORCH_NCCL_TRACE_BUFFER_SIZE"
	// AllocConf is PyTorch's CUDA caching allocator's configuration;
	// AllocConfAny its name for every accelerator since torch 2.9 (where
	// both are set, torch reads AllocConf); AllocConfHIP ROCm's.
	AllocConf    = "PYTORCH_CUDA_ALLOC_CONF"
	AllocConfAny = "PYTORCH_ALLOC_CONF"
	AllocConfHIP = "PYTORCH_HIP_ALLOC_CONF"
)
