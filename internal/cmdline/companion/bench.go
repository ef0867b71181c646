package companion

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/cmdline/flagval"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/bench/rdzvbench"
	"github.com/gorun-dev/gorun/internal/cmdline"
	etcdrdzv "github.com/gorun-dev/gorun/rendezvous/etcd"
)

// The rendezvous benchmark's target (issue 33): at most 1.2x the floor
// of the same run, for each of these counts.
const targetRatio = 1.2

var targetAgents = []int{1024, 2048}

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
			&cli.IntFlag{Name: "processes", Usage: "run the agents in this many processes of their own, beside the store's (1: every agent in the store's process; 0: one process when it has the descriptors, else one per " + strconv.Itoa(rdzvbench.AgentsPerProcess) + " agents)"},
			&cli.BoolFlag{Name: "real-job", Usage: "run a real elastic job of N gorun agents (processes, workers of /bin/sleep, its store on the first agent): its first round, a node's loss and a node's join, then the in-process measure of N beside it"},
			&cli.DurationFlag{Name: "lease-ttl", Usage: "the agents' lease TTL (0: the rendezvous's default, " + etcdrdzv.DefaultLeaseTTL.String() + ")"},
			// A child process of --processes: its share of the agents.
			&cli.StringFlag{Name: "agents-at", Hidden: true},
			&cli.IntFlag{Name: "agents-from", Hidden: true},
			&cli.IntFlag{Name: "agents-count", Hidden: true},
		},
		Action: func(c *cli.Context) error {
			if at := c.String("agents-at"); at != "" {
				cfg := rdzvbench.AgentsConfig{Endpoint: at, Agents: c.Int("agents"), First: c.Int("agents-from"), Count: c.Int("agents-count"), LeaseTTL: c.Duration("lease-ttl")}
				if err := rdzvbench.ServeAgents(c.Context, cfg, os.Stdin, c.App.Writer); err != nil {
					return cli.Exit("bench rendezvous agents: "+err.Error(), 1)
				}
				return nil
			}
			procs := c.Int("processes")
			if procs < 0 {
				return cmdline.Usagef("--processes=%d: want 0 (chosen by the count), 1 (one process) or more", procs)
			}
			self, err := os.Executable()
			if err != nil {
				return cli.Exit("bench rendezvous: "+err.Error(), 1)
			}
			counts, err := flagval.ParseIntList("agents", c.String("agents"))
			if err != nil || len(counts) == 0 {
				return cmdline.Usagef("--agents=%q: want a number or a comma-separated list", c.String("agents"))
			}
			least := 1
			if c.Bool("real-job") {
				least = 2 // one is lost, and one joins
			}
			for _, n := range counts {
				switch {
				case n < least:
					return cmdline.Usagef("--agents=%q: want counts of at least %d", c.String("agents"), least)
				case procs > n:
					return cmdline.Usagef("--processes=%d with --agents=%d: want at most one process per agent", procs, n)
				}
			}
			if ttl := c.Duration("lease-ttl"); ttl < 0 || (ttl > 0 && ttl < time.Second) {
				return cmdline.Usagef("--lease-ttl=%v: want 0 (the default, %v) or at least 1s", ttl, etcdrdzv.DefaultLeaseTTL)
			}
			format, err := cmdline.BenchFormat(c)
			if err != nil {
				return err
			}
			if c.Bool("real-job") {
				return realJob(c, self, counts, format)
			}
			var results []rdzvbench.Result
			for _, n := range counts {
				res, err := runRendezvousBench(c, self, n, procs)
				if err != nil {
					// A count this machine cannot carry through is a
					// measurement too: the row says why, and the next
					// count runs.
					res = rdzvbench.Result{Agents: n, Processes: procs, Failed: err.Error()}
				}
				results = append(results, res)
				text := fmt.Sprintf("%d agents: %.3f s, floor %.3f s (%.2fx); logins %.3f s", res.Agents, res.Seconds, res.FloorSeconds, res.Seconds/res.FloorSeconds, res.LoginSeconds)
				if res.Processes > 1 {
					text += fmt.Sprintf("; %d processes; the store's CPU %.3f s, floor %.3f s (%.2fx); its memory %d KiB per agent; while the job runs, %.1f%% of a core",
						res.Processes, res.StoreCPUSeconds, res.FloorStoreCPUSeconds, res.StoreCPUSeconds/res.FloorStoreCPUSeconds, res.StoreBytesPerAgent>>10, 100*res.RunningStoreCores)
				}
				if res.Skipped != "" {
					text = fmt.Sprintf("%d agents: not run: %s", res.Agents, res.Skipped)
				}
				if res.Failed != "" {
					text = fmt.Sprintf("%d agents: did not complete: %s", res.Agents, res.Failed)
					if res.FloorSeconds > 0 {
						text += fmt.Sprintf(" (the floor did: %.3f s)", res.FloorSeconds)
					}
				}
				if err := cmdline.EmitBenchResult(c, format, res, text); err != nil {
					return err
				}
			}
			if path := c.String("plot"); path != "" {
				note := fmt.Sprintf("gorun bench rendezvous, %s, %d cores, %s; one embedded etcd",
					time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version())
				if err := os.WriteFile(path, rdzvbench.Plot(results, note), 0o644); err != nil {
					return cli.Exit("bench rendezvous: --plot: "+err.Error(), 1)
				}
			}
			return cmdline.WriteBenchSection(c, "bench rendezvous", markdown(results))
		},
	}
}

// realJob runs `gorun bench rendezvous --real-job` for each count; SIGINT
// or SIGTERM ends the job's agents before the benchmark exits.
func realJob(c *cli.Context, self string, counts []int, format string) error {
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	gorun := filepath.Join(filepath.Dir(self), "gorun")
	if _, err := os.Stat(gorun); err != nil {
		gorun = self // gorun-etcd runs a launch as gorun does
	}
	for _, n := range counts {
		dir, err := os.MkdirTemp("", "gorun-bench-agents-")
		if err != nil {
			return cli.Exit("bench rendezvous --real-job: "+err.Error(), 1)
		}
		res, err := rdzvbench.RunJob(ctx, gorun, n, dir)
		if err != nil {
			return cli.Exit(fmt.Sprintf("bench rendezvous --real-job: %v (the agents' logs are in %s)", err, dir), 1)
		}
		os.RemoveAll(dir)
		t := res.Twin
		text := fmt.Sprintf("%d gorun agents, started in %.3f s. To the first / the last agent's workers: round 0 %.3f / %.3f s after the last agent joined; "+
			"a node's loss %.3f / %.3f s; a node's join %.3f / %.3f s. %d MiB per agent. In-process, %d agents: %.3f s, floor %.3f s (%.2fx)",
			n, res.StartSeconds, res.FormFirstSeconds, res.FormSeconds, res.LossFirstSeconds, res.LossSeconds, res.JoinFirstSeconds, res.JoinSeconds,
			res.AgentBytes>>20, t.Agents, t.Seconds, t.FloorSeconds, t.Seconds/t.FloorSeconds)
		if err := cmdline.EmitBenchResult(c, format, res, text); err != nil {
			return err
		}
	}
	return nil
}

// runRendezvousBench measures n agents in procs processes beside the
// store's (0: as many as the descriptors need).
func runRendezvousBench(c *cli.Context, self string, n, procs int) (rdzvbench.Result, error) {
	if procs == 0 {
		if rdzvbench.FilesNeeded(n) <= rdzvbench.FileLimit() {
			procs = 1
		} else {
			procs = (n + rdzvbench.AgentsPerProcess - 1) / rdzvbench.AgentsPerProcess
		}
	}
	if procs == 1 {
		return rdzvbench.Run(c.Context, n, c.Duration("lease-ttl"))
	}
	return rdzvbench.RunSpread(c.Context, self, n, procs, c.Duration("lease-ttl"))
}

// markdown renders the results as a section of docs/benchmarks.md.
func markdown(results []rdzvbench.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Rendezvous (`gorun bench rendezvous`)\n\n")
	fmt.Fprintf(&b, "Measured %s on %d cores (%s), one embedded etcd set up as for a multi-node job (authentication on, every record sealed with the job token), every agent with its own logged-in client. "+
		"Floor: the same clients each opening a watch, granting a lease, putting one key under it and receiving one watch event, measured in the same run. "+
		"Clients log in and connect before either clock starts (logins: every client logging in at once, timed apart); watches are opened inside both clocks (an agent has none before it starts). "+
		"Processes: 1 is every agent in the store's process; more is the agents in processes of their own beside it, where the store's CPU inside each clock is its process's alone.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version())
	b.WriteString("| agents | processes | rendezvous | floor | ratio | logins | the store's CPU, rendezvous / floor | its memory per agent | the store while the job runs |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Skipped != "" || r.Failed != "" {
			why := "not run: " + r.Skipped
			if r.Failed != "" {
				why = "did not complete: " + r.Failed
			}
			if r.FloorSeconds > 0 {
				fmt.Fprintf(&b, "| %d | %d | %s | %.3f s | | %.3f s | | | |\n", r.Agents, r.Processes, why, r.FloorSeconds, r.LoginSeconds)
				continue
			}
			fmt.Fprintf(&b, "| %d | %d | %s | | | | | | |\n", r.Agents, r.Processes, why)
			continue
		}
		cpu, mem, running := "", "", ""
		if r.Processes > 1 {
			cpu = fmt.Sprintf("%.3f / %.3f s (%.2fx)", r.StoreCPUSeconds, r.FloorStoreCPUSeconds, r.StoreCPUSeconds/r.FloorStoreCPUSeconds)
			mem = fmt.Sprintf("%d KiB", r.StoreBytesPerAgent>>10)
			running = fmt.Sprintf("%.1f%% of a core", 100*r.RunningStoreCores)
		}
		fmt.Fprintf(&b, "| %d | %d | %.3f s | %.3f s | %.2fx | %.3f s | %s | %s | %s |\n", r.Agents, r.Processes, r.Seconds, r.FloorSeconds, r.Seconds/r.FloorSeconds, r.LoginSeconds, cpu, mem, running)
	}
	for _, r := range results {
		if slices.Contains(targetAgents, r.Agents) && r.Skipped == "" && r.Failed == "" {
			ok := "met"
			if r.Seconds > targetRatio*r.FloorSeconds {
				ok = "NOT met"
			}
			fmt.Fprintf(&b, "\nTarget for %d agents: at most %.1fx the floor: %s (%.2fx).\n", r.Agents, targetRatio, ok, r.Seconds/r.FloorSeconds)
		}
	}
	return b.String()
}
