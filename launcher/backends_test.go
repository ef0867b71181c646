package launcher

import "github.com/gorun-dev/gorun/rendezvous"

// The backends of package rendezvous satisfy the agent's interface.
var (
	_ Rendezvous = (*rendezvous.Local)(nil)
	_ Rendezvous = (*rendezvous.Static)(nil)
)
