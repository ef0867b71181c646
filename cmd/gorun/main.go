// Command gorun is a torchrun-compatible launcher for distributed
// training: `gorun [flags] SCRIPT [ARGS...]`. See README.md.
package main

import (
	"context"
	"os"

	"github.com/gorun-dev/gorun/internal/cmdline"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(cmdline.Main(context.Background(), os.Args, cmdline.Options{Version: version}))
}
