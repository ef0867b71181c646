// Package elastic adds to gorun's command line what needs etcd: the
// elastic rendezvous (rendezvous/etcd.Open), `gorun store`, `gorun stop`
// and the benchmarks of the store and of the network stack. Only the
// gorun-etcd binary links it.
package elastic

import (
	"context"

	"github.com/gorun-dev/gorun/launcher"
	"github.com/gorun-dev/gorun/rendezvous"
	etcdrdzv "github.com/gorun-dev/gorun/rendezvous/etcd"
)

// Elastic implements cmdline.Elastic.
type Elastic struct{}

// New returns the etcd features of the command line.
func New() *Elastic { return &Elastic{} }

// Rendezvous opens the job's etcd rendezvous (etcdrdzv.Open: hosting the
// embedded store first when this node is its host); the returned
// function stops what it started.
func (e *Elastic) Rendezvous(ctx context.Context, spec rendezvous.Spec) (launcher.Rendezvous, func(), error) {
	s, err := etcdrdzv.Open(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Release, nil
}
