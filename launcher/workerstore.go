package launcher

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/proc"
	"github.com/gorun-dev/gorun/launcher/agentstore"
	"github.com/gorun-dev/gorun/rendezvous"
)

// The single-node and static backends hold the port for the agent (the
// etcd backends' Session is asserted where it is opened, in the
// companion).
var (
	_ AgentStorePorter = (*rendezvous.Local)(nil)
	_ AgentStorePorter = (*rendezvous.Static)(nil)
	_ MeetingHost      = (*rendezvous.Static)(nil)
)

// openWorkerStore binds and serves the workers' store for the agent's
// life when the workers run Python and the rendezvous lets the agent
// hold the master port; nil otherwise (then worker rank 0 serves it, on
// a port the rendezvous picked).
func (a *Agent) openWorkerStore(ctx context.Context) (*agentstore.Server, error) {
	p, ok := a.rdzv.(AgentStorePorter)
	if !ok || !a.cfg.pythonWorkers() {
		return nil, nil
	}
	port := p.AgentStorePort()
	s, err := agentstore.Listen(port, a.cfg.Log)
	if err != nil {
		if port != 0 && errors.Is(err, syscall.EADDRINUSE) {
			advice := "leave %s out for a free port"
			if _, static := a.rdzv.(MeetingHost); static {
				advice = "give every node another %s"
			}
			masterPort := setting.Name("MasterPort")
			return nil, setting.Errorf("%s=%d is taken by another process%s (gorun serves the workers' store there, as torchrun 2.x does): free it, or "+advice+": %w",
				masterPort, port, proc.PortHolderNote(net.JoinHostPort("0.0.0.0", strconv.Itoa(port))), masterPort, err)
		}
		return nil, err
	}
	if m, ok := a.rdzv.(MeetingHost); ok {
		m.MeetOn(s.Divert(rendezvous.StaticMeetingByte, rendezvous.HelloTimeout, rendezvous.MaxPendingHellos))
	}
	s.Serve(ctx)
	return s, nil
}

// useWorkerStore makes round's workers use the agents' store: the master
// node's (group rank 0) serves it, empty for each round's attempt.
func useWorkerStore(s *agentstore.Server, round *rendezvous.Round) {
	if s == nil {
		return
	}
	round.UseAgentStore = true
	if round.GroupRank == 0 {
		s.Reset()
	}
}

// storeLinger bounds how long the master node's agent of a static job
// keeps the workers' store after its own workers succeeded, while the
// other nodes' workers are still connected (torchrun's agents hold an
// exit barrier of 300 s).
const storeLinger = 5 * time.Minute

// lingerForOtherNodes keeps the workers' store, after this node's
// workers succeeded, until the other nodes' workers have closed their
// connections to it (at most storeLinger): under the static backend
// nothing else holds node 0 until the others are done, and its exit
// would take the store from workers still reading it. The etcd backends'
// nodes wait for each other in Succeed.
func (a *Agent) lingerForOtherNodes(ctx context.Context, s *agentstore.Server, round rendezvous.Round, res Result, err error) {
	if _, static := a.rdzv.(MeetingHost); !static || s == nil || err != nil || res.ExitCode != 0 || round.GroupRank != 0 || round.GroupWorldSize < 2 {
		return
	}
	if s.WaitIdle(ctx, time.Second) {
		return
	}
	a.cfg.Log.Infof("this node's workers succeeded; keeping the workers' store until the other nodes' workers are done with it (at most %v)", storeLinger)
	if !s.WaitIdle(ctx, storeLinger) {
		a.cfg.Log.Warnf("the workers' store still has clients after %v: closing it", storeLinger)
	}
}
