package etcd

import "github.com/gorun-dev/gorun/launcher"

// The etcd rendezvous satisfies the agent's interface.
var _ launcher.Rendezvous = (*Rendezvous)(nil)
