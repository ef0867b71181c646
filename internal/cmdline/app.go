package cmdline

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// commandNames are the names of the subcommands newApp adds; a launch is
// any command line whose first argument is not one of them.
var commandNames = []string{"plan", "trace", "bench", "store", "stop", "report"}

// newApp builds the command line: the launch itself is the app's action;
// other tools are subcommands (see bench.go, store.go).
//
// For a launch (args, with the program name first, as isLaunch reads
// them) it builds only the launch: no subcommands,
// and flags without their help categories, which urfave sorts by
// rendering every flag's help line. Those cost a third of a millisecond
// of every launch and serve only --help and the other commands, which
// get the full app.
func newApp(opts Options, args []string) *cli.App {
	flags := launchFlags()
	var commands []*cli.Command
	if isLaunch(args, flags) {
		uncategorized(flags)
	} else {
		commands = []*cli.Command{planCommand(), traceCommand(), benchCommand(opts), storeCommand(opts), stopCommand(opts), reportCommand()}
	}
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
		Flags:           flags,
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

// isLaunch reports whether args (with the program name first) launch a
// script: the first argument that is neither a launch flag nor a flag's
// value is not a command name, and neither help nor the version is asked
// for before it. It reads the arguments as the flag parser does: a bool
// flag takes no separate value, any other flag the next argument unless
// written --flag=value, and "--" ends the flags. A command line it cannot
// place (no script, an unknown flag) gets the full app, whose answer it
// is.
func isLaunch(args []string, flags []cli.Flag) bool {
	bools := map[string]bool{}
	known := map[string]bool{}
	for _, f := range flags {
		_, isBool := f.(*boolFlag)
		for _, n := range f.Names() {
			known[n], bools[n] = true, isBool
		}
	}
	script := func(a string) bool {
		for _, c := range commandNames {
			if a == c {
				return false
			}
		}
		return true
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return i+1 < len(args) && script(args[i+1])
		}
		if len(a) < 2 || a[0] != '-' {
			return script(a)
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		switch {
		case !known[name]:
			return false // help, version, or a mistake
		case hasValue || bools[name]:
		default:
			i++ // the flag's value
		}
	}
	return false
}

// uncategorized removes the launch flags' help categories.
func uncategorized(flags []cli.Flag) {
	for _, f := range flags {
		switch f := f.(type) {
		case *stringFlag:
			f.Category = ""
		case *boolFlag:
			f.Category = ""
		case *intFlag:
			f.Category = ""
		case *float64Flag:
			f.Category = ""
		}
	}
}
