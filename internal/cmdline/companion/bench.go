package companion

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/gorun-dev/gorun/internal/cmdline/flagval"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/bench/rdzvbench"
	"github.com/gorun-dev/gorun/internal/cmdline"
)

// Targets of the rendezvous benchmark (issue 3), for 1024 agents.
const (
	targetAgents  = 1024
	targetRatio   = 2.0
	targetSeconds = 1.5
)

// BenchRendezvousCommand is `gorun bench rendezvous`.
func (e *Commands) BenchRendezvousCommand() *cli.Command {
	return &cli.Command{
		Name:  "rendezvous",
		Usage: "time N agents through the etcd rendezvous against the etcd floor, in the same run",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "agents", Value: "1024", Usage: "number of agents, or a comma-separated list (64,256,1024,4096)"},
			&cli.StringFlag{Name: "format", Value: "json", Usage: "json (one object per count) or text"},
			&cli.StringFlag{Name: "write", Usage: "update this markdown file's rendezvous section (e.g. docs/benchmarks.md)"},
			&cli.StringFlag{Name: "plot", Usage: "draw the run, time per round against agents with its floor, into this SVG file (e.g. docs/rendezvous.svg)"},
		},
		Action: func(c *cli.Context) error {
			counts, err := flagval.ParseIntList("agents", c.String("agents"))
			if err != nil || len(counts) == 0 {
				return cmdline.Usagef("--agents=%q: want a number or a comma-separated list", c.String("agents"))
			}
			format, err := cmdline.BenchFormat(c)
			if err != nil {
				return err
			}
			var results []rdzvbench.Result
			for _, n := range counts {
				res, err := rdzvbench.Run(c.Context, n)
				if err != nil {
					return cli.Exit("bench rendezvous: "+err.Error(), 1)
				}
				results = append(results, res)
				text := fmt.Sprintf("%d agents: %.3f s, floor %.3f s (%.2fx); logins %.3f s", res.Agents, res.Seconds, res.FloorSeconds, res.Seconds/res.FloorSeconds, res.LoginSeconds)
				if res.Skipped != "" {
					text = fmt.Sprintf("%d agents: not run: %s", res.Agents, res.Skipped)
				}
				if err := cmdline.EmitBenchResult(c, format, res, text); err != nil {
					return err
				}
			}
			if path := c.String("plot"); path != "" {
				note := fmt.Sprintf("gorun bench rendezvous, %s, %d cores, %s; one embedded etcd, agents in one process",
					time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version())
				if err := os.WriteFile(path, rdzvbench.Plot(results, note), 0o644); err != nil {
					return cli.Exit("bench rendezvous: --plot: "+err.Error(), 1)
				}
			}
			return cmdline.WriteBenchSection(c, "bench rendezvous", markdown(results))
		},
	}
}

// markdown renders the results as a section of docs/benchmarks.md.
func markdown(results []rdzvbench.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Rendezvous (`gorun bench rendezvous`)\n\n")
	fmt.Fprintf(&b, "Measured %s on %d cores (%s), one embedded etcd set up as for a multi-node job (authentication on, every record sealed with the job token), every agent with its own logged-in client, in one process. "+
		"Floor: the same clients each opening a watch, granting a lease, putting one key under it and receiving one watch event, measured in the same run. "+
		"Clients log in and connect before either clock starts (logins: every client logging in at once, timed apart); watches are opened inside both clocks (an agent has none before it starts).\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version())
	b.WriteString("| agents | rendezvous | floor | ratio | logins |\n|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Skipped != "" {
			fmt.Fprintf(&b, "| %d | not run: %s | | | |\n", r.Agents, r.Skipped)
			continue
		}
		fmt.Fprintf(&b, "| %d | %.3f s | %.3f s | %.2fx | %.3f s |\n", r.Agents, r.Seconds, r.FloorSeconds, r.Seconds/r.FloorSeconds, r.LoginSeconds)
	}
	for _, r := range results {
		if r.Agents == targetAgents && r.Skipped == "" {
			ok := "met"
			if r.Seconds > targetSeconds || r.Seconds > targetRatio*r.FloorSeconds {
				ok = "NOT met"
			}
			fmt.Fprintf(&b, "\nTarget for %d agents: at most %.1fx the floor and %.1f s: %s (%.2fx, %.3f s).\n", targetAgents, targetRatio, targetSeconds, ok, r.Seconds/r.FloorSeconds, r.Seconds)
		}
	}
	return b.String()
}
