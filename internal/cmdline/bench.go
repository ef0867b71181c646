package cmdline

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/bench"
)

// benchCommand groups the benchmarks; each measures its anchor in the
// same run.
func benchCommand(opts Options) *cli.Command {
	rdzv := placeholder("rendezvous", "time N agents through the etcd rendezvous against the etcd floor (--agents N, --format json)")
	commBench := placeholder("comm", "time collectives between N workers launched by gorun, like nccl-tests, against gloo and this machine's floors")
	if opts.Elastic != nil {
		rdzv = opts.Elastic.BenchRendezvousCommand()
		commBench = opts.Elastic.BenchCommCommand()
	}
	return &cli.Command{
		Name:            "bench",
		Usage:           "measure gorun against its anchors (torchrun) in the same run",
		HideHelpCommand: true,
		Subcommands:     []*cli.Command{benchLaunchCommand(), rdzv, benchMemoryCommand(), commBench},
	}
}

func benchLaunchCommand() *cli.Command {
	return &cli.Command{
		Name:  "launch",
		Usage: "empty 2-worker job and failure -> replacement time, gorun vs torchrun",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "python", Value: defaultPython(), Usage: "interpreter for the workers and torchrun"},
			&cli.IntFlag{Name: "runs", Value: 10, Usage: "measured runs per case"},
			&cli.IntFlag{Name: "warmup", Value: 2, Usage: "discarded runs per case"},
			&cli.BoolFlag{Name: "skip-torchrun", Usage: "measure gorun and the floors only"},
			&cli.StringFlag{Name: "write", Usage: "update this markdown file's launch section (e.g. docs/benchmarks.md)"},
		},
		Action: func(c *cli.Context) error {
			if c.Int("runs") < 1 || c.Int("warmup") < 0 {
				return usageError("--runs must be at least 1 and --warmup at least 0")
			}
			self, err := os.Executable()
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			cfg := bench.LaunchConfig{
				Gorun: self, Python: c.String("python"), Runs: c.Int("runs"), Warmup: c.Int("warmup"),
				SkipTorchrun: c.Bool("skip-torchrun"), Progress: c.App.ErrWriter,
			}
			res, err := bench.RunLaunch(c.Context, cfg)
			if err != nil {
				return cli.Exit("bench launch: "+err.Error(), 1)
			}
			enc := json.NewEncoder(c.App.Writer)
			if err := enc.Encode(res); err != nil {
				return cli.Exit(err.Error(), 1)
			}
			md := res.Markdown(time.Now(), cfg.Runs)
			fmt.Fprintln(c.App.ErrWriter, "\n"+md)
			if path := c.String("write"); path != "" {
				if err := bench.UpdateSection(path, "bench launch", md); err != nil {
					return cli.Exit("bench launch: "+err.Error(), 1)
				}
			}
			return nil
		},
	}
}

// defaultPython prefers Debian's interpreter, where python3-torch lives.
func defaultPython() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}
