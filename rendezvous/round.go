package rendezvous

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gorun-dev/gorun/internal/secret"
)

// Errors returned by the backends can be tested against these values with
// errors.Is.
var (
	// ErrClosed is returned by Next after Close.
	ErrClosed = errors.New("rendezvous: closed")
	// ErrInvalidNode is returned when the joining node's description is not
	// usable (no workers, an unknown node rank).
	ErrInvalidNode = errors.New("rendezvous: invalid node")
	// ErrShapeMismatch: this node's shape differs from the job's.
	ErrShapeMismatch = errors.New("rendezvous: node does not match the job")
	// ErrJoinTimeout: not enough nodes joined within the join timeout.
	ErrJoinTimeout = errors.New("rendezvous: join timeout")
	// ErrJobFailed: the job failed (out of restarts, or a failure that is
	// not retried) on some node.
	ErrJobFailed = errors.New("rendezvous: job failed")
	// ErrJobSucceeded: the job already finished successfully.
	ErrJobSucceeded = errors.New("rendezvous: job already succeeded")
	// ErrRoundEnded: the round ended; the node must join the next one.
	ErrRoundEnded = errors.New("rendezvous: round ended")
	// ErrPreempted: the job stopped cleanly on a stop request (every
	// member's workers exited 0 after it).
	ErrPreempted = errors.New("rendezvous: job preempted")
)

// JobFailure is the error of a job that failed on some node: it wraps
// ErrJobFailed and carries the exit code that the failing node's gorun
// exits with (its failing worker's), so that every node of the job exits
// with the same code (what srun, a batch script or an operator reads).
type JobFailure struct {
	// Reason is why the job failed, as the failing node reported it
	// (Fail's reason).
	Reason string
	// ExitCode is the failing node's exit code; 0 when it is not known
	// (a job that failed before its workers ran).
	ExitCode int
}

func (e *JobFailure) Error() string { return "rendezvous: job " + e.Text() }

// Text says the failure in words: "failed (exit code 3): rank 1 ...",
// "failed: why" without an exit code, and "stopped: why" for a job that
// a node stopped (its reason begins "stopped: ").
func (e *JobFailure) Text() string {
	switch {
	case strings.HasPrefix(e.Reason, "stopped: "):
		return e.Reason
	case e.ExitCode > 0:
		return fmt.Sprintf("failed (exit code %d): %s", e.ExitCode, e.Reason)
	}
	return "failed: " + e.Reason
}

// Unwrap makes errors.Is(err, ErrJobFailed) true.
func (e *JobFailure) Unwrap() error { return ErrJobFailed }

// StopRequest is a job-wide request to stop (a preemption): every node's
// workers are told, agree on a step to stop at, save and exit 0 within
// the grace period.
type StopRequest struct {
	// Reason says who asked and why, for the logs.
	Reason string `json:"reason"`
	// Grace, when set, bounds the stop; zero: each agent's
	// --preempt-grace.
	Grace time.Duration `json:"grace,omitempty"`
}

// Node describes the node that joins a round.
type Node struct {
	// Addr is the address other nodes and the workers reach this node at.
	Addr string
	// LocalWorldSize is the number of workers this node starts.
	LocalWorldSize int
	// Role is the workers' role name (torchrun's --role).
	Role string
	// MasterPort is the port this node's agent holds for the workers'
	// store: the round's master port when this node is its master (0:
	// the rendezvous finds a free one).
	MasterPort int
}

// Validate reports whether n can join a round.
func (n Node) Validate() error {
	if n.LocalWorldSize < 1 {
		return fmt.Errorf("%w: local world size %d, want at least 1", ErrInvalidNode, n.LocalWorldSize)
	}
	return nil // any role, the empty one included (torchrun's --role '')
}

// Round is one closed rendezvous round as seen by one node.
type Round struct {
	// RunID is the job's id (torchrun's --rdzv-id, TORCHELASTIC_RUN_ID).
	RunID string
	// Number counts the rounds of this job from 0.
	Number int
	// RestartCount is the number of failure restarts before this round
	// (TORCHELASTIC_RESTART_COUNT); membership changes do not count. With
	// a shared store it is counted across all nodes.
	RestartCount int
	// GroupRank is this node's rank among the nodes (GROUP_RANK).
	GroupRank int
	// GroupWorldSize is the number of nodes in the round (GROUP_WORLD_SIZE).
	GroupWorldSize int
	// BaseRank is the global rank of this node's local rank 0.
	BaseRank int
	// WorldSize is the number of workers on all nodes (WORLD_SIZE).
	WorldSize int
	// BaseRoleRank is the role rank of this node's local rank 0 (ROLE_RANK).
	BaseRoleRank int
	// RoleWorldSize is the number of workers with this node's role.
	RoleWorldSize int
	// MasterAddr and MasterPort are where worker rank 0 serves the
	// workers' store (MASTER_ADDR, MASTER_PORT).
	MasterAddr string
	MasterPort int
	// UseAgentStore tells the workers whether the agent already serves the
	// store at MasterAddr:MasterPort (TORCHELASTIC_USE_AGENT_STORE). When
	// false, worker rank 0 hosts it.
	UseAgentStore bool
	// StoreEndpoints and StorePrefix, when set, are the etcd the agents
	// share and the key prefix of this run and round, for workers that
	// exchange bootstrap data through it (GORUN_STORE_ENDPOINTS,
	// GORUN_STORE_PREFIX).
	StoreEndpoints []string
	StorePrefix    string
	// JobSecret, when set, is the job's secret shared by every node (hex):
	// workers get it in GORUN_JOB_SECRET to authenticate the worker store
	// and the mesh. Empty: the launcher makes one for a single-node job.
	// Printed (a Round in a log line), it shows a placeholder.
	JobSecret secret.Secret
	// StoreUser and StorePassword, when set, log in to the store at
	// StoreEndpoints (GORUN_STORE_USER, GORUN_STORE_PASSWORD).
	StoreUser, StorePassword string
	// SpareSince, when set, is when this node began to wait as a hot
	// spare before this round took it in (the round before was as large
	// as the job's layout allows).
	SpareSince time.Time
}

// Event tells a running node that its round must end for a reason outside
// the node: a peer's workers failed, a node was lost, or a node is waiting
// to join.
type Event struct {
	// Reason says why, in words fit for a log line.
	Reason string
	// Failure is true when the round ends because of a failure (it counts
	// against the restart budget), false for a membership change.
	Failure bool
}
