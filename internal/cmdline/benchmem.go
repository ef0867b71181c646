package cmdline

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/bench"
	"github.com/gorun-dev/gorun/internal/bench/membench"
	"github.com/gorun-dev/gorun/memory"
)

// benchMemoryCommand is `gorun bench memory`: training-step memory
// patterns replayed on the simulated device under each reuse mode.
func benchMemoryCommand() *cli.Command {
	return &cli.Command{
		Name:  "memory",
		Usage: "replay a training step's memory pattern on the simulated device: peak memory, events and violations per MULTI_STREAM_MEMORY_REUSE mode",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workload", Value: "all", Usage: "ddp, fsdp, ddp-late-wait, fragmentation, or all"},
			&cli.StringFlag{Name: "mode", Usage: "0, 1, 2, 3, none (no protection), or all (default: " + memory.ReuseEnv + ", else 2)"},
			&cli.BoolFlag{Name: "expandable-segments", Usage: "the allocator grows one segment per stream instead of fixed segments"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text (a table) or json (one object per run)"},
			&cli.StringFlag{Name: "write", Usage: "update this markdown file's memory section (e.g. docs/benchmarks.md); text format only"},
		},
		Action: benchMemoryAction,
	}
}

func benchMemoryAction(c *cli.Context) error {
	workloads := membench.Workloads
	if w := c.String("workload"); w != "all" {
		workloads = []string{w}
	}
	modes, err := benchModes(c.String("mode"))
	if err != nil {
		return Usage(err)
	}
	format := c.String("format")
	if format != "text" && format != "json" {
		return Usagef("--format=%q: want text or json", format)
	}
	if format == "json" && c.String("write") != "" {
		return Usagef("--write takes the text format, not --format=json")
	}
	var results []membench.Result
	for _, w := range workloads {
		for _, m := range modes {
			res, err := membench.Run(c.Context, membench.Config{Workload: w, Mode: m, ExpandableSegments: c.Bool("expandable-segments")})
			if err != nil {
				if strings.HasPrefix(err.Error(), "--workload") {
					return Usage(err)
				}
				return cli.Exit("bench memory: "+message(err), 1)
			}
			results = append(results, res)
		}
	}
	if format == "json" {
		enc := json.NewEncoder(c.App.Writer)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				return cli.Exit(message(err), 1)
			}
		}
		return nil
	}
	// The anchor is mode 0, PyTorch's classic recordStream, in the same run.
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(bench.MemoryColumns(), "\t")+"\t")
	for _, row := range bench.MemoryRows(results) {
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return cli.Exit("bench memory: "+message(err), 1)
	}
	if path := c.String("write"); path != "" {
		expandable := c.Bool("expandable-segments")
		if err := bench.UpdateSection(path, bench.MemorySection(expandable), bench.MemoryMarkdown(results, expandable)); err != nil {
			return cli.Exit("bench memory: --write: "+message(err), 1)
		}
		fmt.Fprintf(c.App.Writer, "updated section %q of %s\n", bench.MemorySection(expandable), path)
	}
	return nil
}

// benchModes reads --mode: the environment's mode when empty.
func benchModes(s string) ([]memory.Mode, error) {
	switch s {
	case "":
		m, err := memory.ModeFromEnv()
		return []memory.Mode{m}, err
	case "all":
		return []memory.Mode{memory.ModeRecordStream, memory.ModeEraseRecordStream, memory.ModeAvoidRecordStream, memory.ModeEraseWithBlock, memory.ModeNone}, nil
	case "none":
		return []memory.Mode{memory.ModeNone}, nil
	}
	m, err := memory.ParseMode(s)
	if err != nil || s == "" {
		return nil, fmt.Errorf("--mode=%q: want 0, 1, 2, 3, none or all", s)
	}
	return []memory.Mode{m}, nil
}
