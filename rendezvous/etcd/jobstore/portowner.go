package jobstore

import (
	"os"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/internal/sys/proc"
)

// OthersPort refuses a store port of this host (endpoint) that another
// user's process holds: it is not an agent of this job (a job's agents
// run as one user), and joining it would hand it this node's login. It
// is nil for a port that is free, this user's, or whose owner is unknown.
func OthersPort(endpoint string) error {
	uid, ok := proc.PortOwner(endpoint)
	if !ok || uid == os.Getuid() {
		return nil
	}
	return setting.Errorf("the store's port %s on this host is held by %s, not by an agent of this job (they run as you): choose another port (%s HOST:PORT), or have that process stopped", endpoint, private.UserName(uid), setting.Name("Endpoint"))
}
