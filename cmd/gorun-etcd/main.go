// Command gorun-etcd is gorun with etcd linked in: the elastic multi-node
// rendezvous, the embedded store and `gorun store`. gorun runs it (same
// pid, same arguments) when a job or command needs etcd; it can also be
// run directly.
package main

import (
	"context"
	"os"

	"github.com/gorun-dev/gorun/internal/cmdline"
	"github.com/gorun-dev/gorun/internal/cmdline/companion"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(cmdline.Main(context.Background(), os.Args, cmdline.Options{Version: version, Companion: companion.New()}))
}
