package main

import "github.com/urfave/cli/v2"

// benchCommand groups the benchmarks.
func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure gorun against its anchors (torchrun) in the same run",
	}
}
