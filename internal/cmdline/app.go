package cmdline

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// newApp builds the command line: the launch itself is the app's action;
// other tools are subcommands (see bench.go, store.go).
func newApp(opts Options) *cli.App {
	commands := []*cli.Command{planCommand(), traceCommand(), benchCommand(opts), storeCommand(opts)}
	return &cli.App{
		Name:    "gorun",
		Usage:   "launch distributed training workers, a drop-in replacement for torchrun",
		Version: opts.Version,
		UsageText: "gorun [flags] SCRIPT [ARGS...]\n" +
			"gorun --nproc-per-node=8 train.py --lr 3e-4\n" +
			"gorun bench launch",
		Description: "Every torchrun flag is accepted in both spellings (--nproc-per-node and --nproc_per_node), with torchrun's\n" +
			"PET_<FLAG> environment fallbacks and GORUN_<FLAG> ones; a flag beats the environment. Everything after SCRIPT\n" +
			"reaches the script untouched. gorun exits with the first failed worker's exit code (128+N for signal N);\n" +
			"torchrun exits 1.",
		HideHelpCommand: true,
		Flags:           launchFlags(),
		Action:          func(c *cli.Context) error { return launchAction(c, opts) },
		Commands:        commands,
		// Errors are reported and turned into exit codes in main, where the
		// program exits once, after every deferred clean-up ran.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return fmt.Errorf("%w", err)
		},
	}
}
