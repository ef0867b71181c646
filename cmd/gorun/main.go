// Command gorun is a torchrun-compatible launcher for distributed
// training: `gorun [flags] SCRIPT [ARGS...]`. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(context.Background(), os.Args))
}

// run executes the command line and returns the process exit code: the
// code an action chose (cli.Exit), or 2 for a usage error, as torchrun's
// argparse does.
func run(ctx context.Context, args []string) int {
	err := newApp().RunContext(ctx, args)
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(os.Stderr, "gorun: "+msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(os.Stderr, "gorun: "+err.Error())
	fmt.Fprintln(os.Stderr, "run 'gorun --help' for usage")
	return 2
}
