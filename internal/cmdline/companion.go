package cmdline

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/launcher"
	"github.com/gorun-dev/gorun/rendezvous"
)

// The companion binary. gorun leaves out what needs etcd or the network
// stack, to start fast; gorun-etcd links it (internal/cmdline/companion)
// and gorun hands such a job or command over to it by exec.

// CompanionBinary is the name of the binary with etcd linked in.
const CompanionBinary = "gorun-etcd"

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

// storeCommand is `gorun store`, a standalone embedded etcd for people who
// have none; gorun-etcd provides it.
func storeCommand(opts Options) *cli.Command {
	if opts.Companion != nil {
		return opts.Companion.StoreCommand()
	}
	return placeholder("store", "run an embedded etcd server for multi-node jobs (--listen, --data-dir, --log-level)")
}

// stopCommand is `gorun stop`, from gorun-etcd.
func stopCommand(opts Options) *cli.Command {
	if opts.Companion != nil {
		return opts.Companion.StopCommand()
	}
	return placeholder("stop", "ask a running multi-node job to stop cleanly (a preemption): gorun stop --rdzv-endpoint=HOST:PORT RUN_ID")
}
