package workerenv

// The Python probe's variables (launcher/probe's sitecustomize.py, which
// gorun puts on every Python worker's path): the agent sets the first
// three, the probe the last.
const (
	// ProbeFile is the worker's snapshot file; unset, the probe does
	// nothing.
	ProbeFile = "GORUN_PROBE_FILE"
	// ProbeRequest is the attempt's request file: a new id there asks
	// every worker for its stacks and flight recorder.
	ProbeRequest = "GORUN_PROBE_REQUEST"
	// ProbeInterval is the seconds between snapshots.
	ProbeInterval = "GORUN_PROBE_INTERVAL"
	// ProbeOwner is set by the probe to its process's pid, so that the
	// worker's Python children (data loaders) do not report as it.
	ProbeOwner = "GORUN_PROBE_OWNER"
)
