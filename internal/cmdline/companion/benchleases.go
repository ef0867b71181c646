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

// BenchLeasesCommand is `gorun bench leases`: the store's cost of keeping
// N nodes' leases alive at each TTL, against how fast a silent node is
// dropped, measured in the same run; it chose the default lease_ttl.
func (e *Commands) BenchLeasesCommand() *cli.Command {
	return &cli.Command{
		Name:  "leases",
		Usage: "what keeping N nodes' leases alive costs the store, against how fast a silent node is dropped",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "nodes", Value: "1024,4096", Usage: "number of nodes (leases), or a comma-separated list"},
			&cli.StringFlag{Name: "ttl", Value: "2s,3s,5s,10s", Usage: "lease TTLs, comma-separated (whole seconds)"},
			&cli.DurationFlag{Name: "window", Value: 10 * time.Second, Usage: "how long the store's CPU is measured for each case"},
			&cli.StringFlag{Name: "format", Value: "json", Usage: "json (one object per case) or text"},
			&cli.StringFlag{Name: "write", Usage: "update this markdown file's leases section (e.g. docs/benchmarks.md)"},
		},
		Action: func(c *cli.Context) error {
			counts, err := flagval.ParseIntList("nodes", c.String("nodes"))
			if err != nil || len(counts) == 0 {
				return cmdline.Usagef("--nodes=%q: want a number or a comma-separated list", c.String("nodes"))
			}
			var ttls []time.Duration
			for _, v := range strings.Split(c.String("ttl"), ",") {
				d, err := time.ParseDuration(strings.TrimSpace(v))
				if err != nil || d < time.Second || d%time.Second != 0 {
					return cmdline.Usagef("--ttl=%q: want whole seconds of at least 1s, comma-separated (2s,3s)", c.String("ttl"))
				}
				ttls = append(ttls, d)
			}
			format, err := cmdline.BenchFormat(c)
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return cli.Exit("bench leases: "+err.Error(), 1)
			}
			var results []rdzvbench.LeaseResult
			for _, n := range counts {
				for _, ttl := range ttls {
					res, err := rdzvbench.RunLeases(c.Context, exe, n, ttl, c.Duration("window"))
					if err != nil {
						return cli.Exit("bench leases: "+err.Error(), 1)
					}
					results = append(results, res)
					text := fmt.Sprintf("%d nodes, TTL %v: %.0f keep-alives/s, store %.1f%% of a core; a silent node dropped in %.2f s", res.Nodes, ttl, res.KeepAlivesPerSecond, 100*res.StoreCPU, res.DropSeconds)
					if err := cmdline.EmitBenchResult(c, format, res, text); err != nil {
						return err
					}
				}
			}
			return cmdline.WriteBenchSection(c, "bench leases", leasesMarkdown(results, c.Duration("window")))
		},
	}
}

// leasesMarkdown renders the results as a section of docs/benchmarks.md.
func leasesMarkdown(results []rdzvbench.LeaseResult, window time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Leases (`gorun bench leases`)\n\n")
	fmt.Fprintf(&b, "Measured %s on %d cores (%s). A `gorun store` in its own process (authentication on, the job's TLS); N leases kept alive by etcd's client (a renewal every TTL/3), spread over 64 clients; the store's CPU over %v. Dropped: from a node's last renewal to its key's deletion reaching a watcher, measured in the same run.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version(), window)
	b.WriteString("| nodes | lease TTL | keep-alives/s | store CPU | silent node dropped in |\n|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %d | %.0f s | %.0f | %.1f%% of a core | %.2f s |\n", r.Nodes, r.TTLSeconds, r.KeepAlivesPerSecond, 100*r.StoreCPU, r.DropSeconds)
	}
	return b.String()
}
