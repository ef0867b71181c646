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
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/launcher"
	"github.com/gorun-dev/gorun/rendezvous"
)

// CompanionBinary is the name of the binary with etcd linked in.
const CompanionBinary = "gorun-etcd"

// Options configures the command line.
type Options struct {
	// Version is printed by --version.
	Version string
	// Companion provides the features that need etcd or the network
	// stack; nil in the gorun binary, which then execs gorun-etcd for
	// them.
	Companion Companion
}

// Companion is what gorun-etcd, the companion binary, adds to the
// command line.
type Companion interface {
	// Rendezvous builds the etcd-backed rendezvous of a launch. The
	// returned function releases what it started (an embedded store).
	Rendezvous(ctx context.Context, spec rendezvous.Spec) (launcher.Rendezvous, func(), error)
	// StoreCommand is `gorun store`: a standalone embedded etcd.
	StoreCommand() *cli.Command
	// StopCommand is `gorun stop RUN_ID`: a job-wide stop request.
	StopCommand() *cli.Command
	// BenchRendezvousCommand is `gorun bench rendezvous`.
	BenchRendezvousCommand() *cli.Command
	// BenchLeasesCommand is `gorun bench leases`.
	BenchLeasesCommand() *cli.Command
	// BenchCommCommand is `gorun bench comm` (it needs the network stack,
	// which gorun itself leaves out to start fast).
	BenchCommCommand() *cli.Command
}

// Main runs the command line and returns the process exit code: the code
// an action chose, or 2 for a usage error, as torchrun's argparse does.
func Main(ctx context.Context, args []string, opts Options) int {
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
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(os.Stderr, prefixed(msg))
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(os.Stderr, prefixed(err.Error()))
	fmt.Fprintln(os.Stderr, "run 'gorun --help' for usage")
	return 2
}

// execCompanion replaces this process with gorun-etcd, run with the same
// arguments and environment. It returns only on failure.
func execCompanion(why string) error {
	path, err := findCompanion()
	if err != nil {
		return Usagef("%s needs %s, the gorun binary with etcd linked in: %v. Build it with `make build` (bin/%s) and keep it next to gorun, or set GORUN_ETCD_BINARY", why, CompanionBinary, err, CompanionBinary)
	}
	argv := append([]string{path}, os.Args[1:]...)
	if err := syscall.Exec(path, argv, os.Environ()); err != nil {
		return cli.Exit(fmt.Sprintf("%s: run %s: %v", why, path, err), 1)
	}
	return nil
}

// findCompanion looks for gorun-etcd: GORUN_ETCD_BINARY, next to this
// executable, then on PATH.
func findCompanion() (string, error) {
	if p := os.Getenv("GORUN_ETCD_BINARY"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("GORUN_ETCD_BINARY=%s: %w", p, err)
		}
		return p, nil
	}
	var tried []string
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), CompanionBinary)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	if p, err := exec.LookPath(CompanionBinary); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("not found at %v nor on PATH", tried)
}

// placeholder stands for a command of gorun-etcd in the gorun binary: it
// shows in --help and execs gorun-etcd when run.
func placeholder(name, usage string) *cli.Command {
	return &cli.Command{
		Name:            name,
		Usage:           usage,
		SkipFlagParsing: true,
		Action: func(*cli.Context) error {
			return execCompanion("gorun " + name)
		},
	}
}

// prefixed is msg after "gorun: ", unless it names its command already
// ("gorun stop: ...").
func prefixed(msg string) string {
	if strings.HasPrefix(msg, "gorun ") || strings.HasPrefix(msg, "gorun:") {
		return msg
	}
	return "gorun: " + msg
}
