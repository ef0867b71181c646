// Package companion is what the gorun-etcd binary adds to gorun's
// command line, the features with heavy dependencies: the elastic
// rendezvous (rendezvous/etcd.Open), `gorun store`, `gorun stop`, the
// benchmarks of the store (etcd) and `gorun bench comm` (the network
// stack). The gorun binary leaves them out to start fast and execs
// gorun-etcd when a command needs them.
package companion

import (
	"context"

	"github.com/gorun-dev/gorun/launcher"
	"github.com/gorun-dev/gorun/rendezvous"
	etcdrdzv "github.com/gorun-dev/gorun/rendezvous/etcd"
)

// The optional capabilities the agent finds by type assertion on its
// rendezvous: asserted here, so that a renamed method fails the build
// instead of silently turning off job-wide preemption, the hang vote,
// the records of ranks that left, the straggler watch across nodes, the
// flight recorder's gathering or the workers' store on the master node.
var (
	_ launcher.Preempter            = (*etcdrdzv.Session)(nil)
	_ launcher.HangVoter            = (*etcdrdzv.Session)(nil)
	_ launcher.FlightRecorderSharer = (*etcdrdzv.Session)(nil)
	_ launcher.LeftRankSharer       = (*etcdrdzv.Session)(nil)
	_ launcher.ArrivalSharer        = (*etcdrdzv.Session)(nil)
	_ launcher.AgentStorePorter     = (*etcdrdzv.Session)(nil)
)

// Commands implements cmdline.Companion.
type Commands struct{}

// New returns the companion binary's commands.
func New() *Commands { return &Commands{} }

// Rendezvous opens the job's etcd rendezvous (etcdrdzv.Open: hosting the
// embedded store first when this node is its host); the returned
// function stops what it started.
func (e *Commands) Rendezvous(ctx context.Context, spec rendezvous.Spec) (launcher.Rendezvous, func(), error) {
	s, err := etcdrdzv.Open(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Release, nil
}
