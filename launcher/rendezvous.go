package launcher

import (
	"context"
	"net"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
)

// The rendezvous as the launcher sees it: one interface every backend
// implements (Rendezvous), and the optional capabilities a backend may
// add, each found by a type assertion on the backend. Without one, the
// feature it serves works on this node alone, or not at all:
//
//	capability            without it
//	Preempter             a stop request stops this node's workers only
//	HangVoter             --hang-timeout judges this node's ranks only
//	FlightRecorderSharer  a failed round's flight recorders are this node's only
//	ArrivalSharer         the straggler watch compares this node's ranks only
//	LeftRankSharer          a rank that left on another node is not named
//	AgentStorePorter      the workers serve their own store (--no-python)
//	MeetingHost           the static meeting is not diverted from the workers' store
//
// The backends that have them assert so at compile time
// (internal/cmdline/companion for the etcd Session, workerstore.go and
// backends_test.go for the static and single-node ones), so that a
// renamed method cannot turn a capability off unnoticed.

// Rendezvous is what the agent needs from a rendezvous backend; the
// backends live in package rendezvous and its subpackages.
type Rendezvous interface {
	// Next joins the next round and blocks until it closes.
	Next(ctx context.Context, node rendezvous.Node) (rendezvous.Round, error)
	// Watch returns a channel that delivers an event when the round must
	// end for a reason outside this node; a nil channel if that cannot
	// happen. It stops when ctx ends.
	Watch(ctx context.Context, round rendezvous.Round) <-chan rendezvous.Event
	// Fail reports that this node's workers failed in round and says
	// whether they restart: the failure is retriable and the restart budget
	// (shared by all nodes where the backend has a store) allows it.
	Fail(ctx context.Context, round rendezvous.Round, reason string, exitCode int, retriable bool) (bool, error)
	// Succeed reports that this node's workers all succeeded in round and
	// waits for the job's outcome: nil when the job is done,
	// rendezvous.ErrRoundEnded when this node must join a new round.
	Succeed(ctx context.Context, round rendezvous.Round) error
	// Close leaves the rendezvous.
	Close(ctx context.Context) error
}

// Preempter is a rendezvous that shares stop requests among the job's
// nodes (rendezvous/etcd); without one, a stop request stays on this node.
type Preempter interface {
	// RequestStop records a job-wide stop request; the first stands.
	RequestStop(ctx context.Context, req rendezvous.StopRequest) error
	// WatchStop delivers the job's stop request once one is recorded;
	// the channel closes when ctx ends.
	WatchStop(ctx context.Context) <-chan rendezvous.StopRequest
	// SucceedStopped is Succeed for workers that exited 0 on the stop
	// request: the job's outcome is preempted whatever became of the
	// request's key (rendezvous.ErrPreempted once every node reported).
	SucceedStopped(ctx context.Context, round rendezvous.Round) error
}

// HangVoter is a rendezvous through which the nodes of a round judge a
// hang together (the etcd backends). A node votes quiet while none of its
// ranks showed a sign of life for the hang timeout; the round is declared
// hung when every node is quiet, or by a node that sees the cause among
// its own ranks (one left, or is outside any collective while the others
// wait). Every node then asks its probes for their evidence, shares it,
// and judges the same merged evidence, so that every node names the same
// rank before any worker is stopped.
type HangVoter interface {
	// VoteHang records whether this node is quiet.
	VoteHang(ctx context.Context, round rendezvous.Round, quiet bool) error
	// DeclareHung declares the round hung, once (false: it was already).
	DeclareHung(ctx context.Context, round rendezvous.Round, why string) (bool, error)
	// WatchHung delivers the round's declaration once.
	WatchHung(ctx context.Context, round rendezvous.Round) <-chan rendezvous.HangDeclared
	// ShareHangEvidence puts this node's evidence and returns every
	// node's as it arrives within wait.
	ShareHangEvidence(ctx context.Context, round rendezvous.Round, evidence []byte, wait time.Duration) ([][]byte, error)
}

// FlightRecorderSharer is a rendezvous that gathers the nodes' flight-recorder
// reports on a failed round (the etcd backends), for one job-wide
// verdict.
type FlightRecorderSharer interface {
	ShareFlightRecorders(ctx context.Context, round rendezvous.Round, report []byte, wait time.Duration) ([][]byte, error)
}

// ArrivalSharer is a rendezvous through which the nodes compare when
// their ranks enter the default group's collectives (the etcd backends):
// the job-wide straggler watch, which names a node whose ranks all come
// late together (a slow host, a throttled GPU, a bad link), which no
// node's own watch can see.
type ArrivalSharer interface {
	// ShareArrivals puts this node's newest report.
	ShareArrivals(ctx context.Context, round rendezvous.Round, report []byte) error
	// WatchArrivals delivers every node's reports as they are put.
	WatchArrivals(ctx context.Context, round rendezvous.Round) <-chan rendezvous.NodeReport
}

// LeftRankSharer is a rendezvous that keeps, for the round, the ranks that
// exited 0 while the others ran (the etcd backends): a node whose ranks
// then lose their peer names the rank that left on another node.
type LeftRankSharer interface {
	RecordLeft(ctx context.Context, round rendezvous.Round, left rendezvous.LeftRank) error
	LeftRanks(ctx context.Context, round rendezvous.Round, wait time.Duration) ([]rendezvous.LeftRank, error)
}

// AgentStorePorter is a rendezvous under which the agent serves the
// workers' store itself (package agentstore), as torchrun 2.x does for
// Python workers: AgentStorePort is the port the store must bind (0: one
// the kernel picks), and the rendezvous takes the port the agent holds
// (Node.MasterPort) for the round's master. The port is bound before it
// is handed to anyone, so no other process can take it between the
// choice and the workers' use (the single node and the etcd backends;
// the static backend's node 0 meets the others on its port first).
type AgentStorePorter interface {
	AgentStorePort() int
}

// MeetingHost is a rendezvous whose nodes meet on the master port before
// the workers use it (the static backend's node 0): the agent's store
// diverts the meeting's connections to it, so that the port is held from
// the meeting to the job's end, never free for another process between.
type MeetingHost interface {
	MeetOn(ln net.Listener)
}
