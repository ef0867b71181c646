package cmdline

import "github.com/urfave/cli/v2"

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
