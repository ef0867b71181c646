package cmdline

import (
	"encoding/json"
	"fmt"

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
			if c.NArg() != 1 {
				return cli.Exit("trace: want one argument, the directory of the dumps (fr_trace_rank_<rank>.json); flags go before it", 2)
			}
			format := c.String("format")
			if format != "text" && format != "json" {
				return cli.Exit(fmt.Sprintf("trace: --format=%q: want text or json", format), 2)
			}
			v, err := watchdog.AnalyzeDir(c.Args().First())
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
