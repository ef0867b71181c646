// Package cmdline is gorun's command line: flags, commands, and the
// mapping from flags to the launcher's configuration. cmd/gorun and
// cmd/gorun-etcd are thin mains around it.
//
// Two binaries share it. gorun runs everything that needs no etcd
// (single-node and static jobs, plans, benchmarks of the launch) and starts
// fast. gorun-etcd also links the etcd client and server, whose package
// initialisation alone costs tens of milliseconds at every start; gorun
// replaces itself with gorun-etcd (same pid, same arguments) when a job or
// command needs etcd.
package cmdline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/sys/private"
)

// Options configures the command line.
type Options struct {
	// Version is printed by --version.
	Version string
	// Companion provides the features that need etcd or the network
	// stack; nil in the gorun binary, which then execs gorun-etcd for
	// them.
	Companion Companion
}

// Main runs the command line and returns the process exit code: the code
// an action chose, or 2 for a usage error, as torchrun's argparse does.
func Main(ctx context.Context, args []string, opts Options) int {
	// Workers and the store get stdin, stdout, stderr and what gorun
	// hands them, never a descriptor of the shell that started gorun.
	if err := private.CloseInheritedOnExec(); err != nil {
		fmt.Fprintf(os.Stderr, "gorun: warning: inherited descriptors may reach the workers: %v\n", err)
	}
	args, err := expandAbbreviations(args, launchFlags())
	if err == nil {
		app := newApp(opts, args)
		args = flagsFirst(app.Commands, args)
		err = app.RunContext(ctx, args)
	}
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := message(err); msg != "" {
			fmt.Fprintln(os.Stderr, prefixed(msg))
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(os.Stderr, prefixed(message(err)))
	fmt.Fprintln(os.Stderr, "run 'gorun --help' for usage")
	return 2
}

// prefixed is msg after "gorun: ", unless it names its command already
// ("gorun stop: ...").
func prefixed(msg string) string {
	if strings.HasPrefix(msg, "gorun ") || strings.HasPrefix(msg, "gorun:") {
		return msg
	}
	return "gorun: " + msg
}
