package cmdline

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/watchdog"
)

// traceCommand is `gorun trace DIR`: merge the ranks' flight-recorder
// dumps and say who hung on what.
func traceCommand() *cli.Command {
	return &cli.Command{
		Name:      "trace",
		Usage:     "merge the ranks' flight-recorder dumps in DIR and name the rank(s) that hung, the collective, and any desync",
		ArgsUsage: "DIR",
		Flags:     []cli.Flag{&cli.StringFlag{Name: "format", Value: "text", Usage: "text or json"}},
		Action: func(c *cli.Context) error {
			dir, format, err := traceArgs(c.Args().Slice(), c.String("format"))
			if err != nil {
				return cli.Exit("trace: "+err.Error(), 2)
			}
			v, err := watchdog.AnalyzeDir(dir)
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			if format == "json" {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			_, err = fmt.Fprint(c.App.Writer, v.Text())
			return err
		},
	}
}

// traceArgs takes the directory and --format from args, where the flag
// may also follow the directory (the flag parser stops at the first
// argument).
func traceArgs(args []string, format string) (dir, f string, err error) {
	var dirs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--format" || a == "-format":
			if i+1 == len(args) {
				return "", "", fmt.Errorf("--format needs a value: text or json")
			}
			format = args[i+1]
			i++
		case strings.HasPrefix(a, "--format="):
			format = strings.TrimPrefix(a, "--format=")
		default:
			dirs = append(dirs, a)
		}
	}
	if len(dirs) != 1 {
		return "", "", fmt.Errorf("want one argument, the directory of the dumps (fr_trace_rank_<rank>.json); got %d", len(dirs))
	}
	if format != "text" && format != "json" {
		return "", "", fmt.Errorf("--format=%q: want text or json", format)
	}
	return dirs[0], format, nil
}
