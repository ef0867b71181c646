package companion

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/comm/world"
	"github.com/gorun-dev/gorun/internal/bench/commbench"
	"github.com/gorun-dev/gorun/internal/cmdline"
	"github.com/gorun-dev/gorun/memory"
)

// BenchCommCommand is `gorun bench comm`: it launches --nproc-per-node
// workers through gorun (this binary, which then runs itself as each
// worker with --worker) and measures the machine's floors and gloo in the
// same run.
func (e *Commands) BenchCommCommand() *cli.Command {
	return &cli.Command{
		Name:  "comm",
		Usage: "time collectives between N workers launched by gorun, like nccl-tests, against gloo and this machine's floors",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nproc-per-node", Value: 2, Usage: "workers"},
			&cli.StringFlag{Name: "backend", Value: "cpu", Usage: world.Backends + " (nccl: one GPU per worker, LOCAL_RANK)"},
			&cli.StringFlag{Name: "ops", Value: "all_reduce", Usage: "comma-separated: " + strings.Join(commbench.Ops, ", ")},
			&cli.StringFlag{Name: "sizes", Value: "1MiB,16MiB,64MiB", Usage: "comma-separated sizes, e.g. 4KiB,1MiB,64MiB"},
			&cli.StringFlag{Name: "dtype", Value: "float32", Usage: "float32, float64, bfloat16, float16, int32, int64 or uint8"},
			&cli.IntFlag{Name: "iters", Value: 20, Usage: "timed iterations per size"},
			&cli.IntFlag{Name: "warmup", Value: 5, Usage: "untimed iterations per size"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text or json"},
			&cli.StringFlag{Name: "python", Value: "python3", Usage: "interpreter with torch for the gloo anchor"},
			&cli.BoolFlag{Name: "skip-anchors", Usage: "measure gorun's collectives only"},
			&cli.BoolFlag{Name: "worker", Hidden: true},
		},
		Action: benchCommAction,
	}
}

func benchCommAction(c *cli.Context) error {
	cfg, err := benchCommConfig(c)
	if err != nil {
		return cmdline.Usage(err)
	}
	if c.Bool("worker") {
		if err := commbench.RunWorker(c.Context, cfg, c.App.Writer); err != nil {
			return cli.Exit("bench comm worker: "+err.Error(), 1)
		}
		return nil
	}
	n := c.Int("nproc-per-node")
	if n < 1 {
		return cmdline.Usagef("--nproc-per-node=%d: want at least 1", n)
	}
	self, err := os.Executable()
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	args := []string{"--nproc-per-node=" + strconv.Itoa(n), "--no-python", "--no-prefix", self, "bench", "comm", "--worker", "--backend", cfg.Backend,
		"--ops", c.String("ops"), "--sizes", c.String("sizes"), "--dtype", c.String("dtype"),
		"--iters", strconv.Itoa(cfg.Iters), "--warmup", strconv.Itoa(cfg.Warmup), "--format", "json"}
	cmd := exec.CommandContext(c.Context, self, args...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, c.App.ErrWriter
	if err := cmd.Run(); err != nil {
		return cli.Exit(fmt.Sprintf("bench comm: the workers failed: %v", err), 1)
	}
	var rep commbench.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return cli.Exit(fmt.Sprintf("bench comm: rank 0's report: %v: %q", err, stdout.String()), 1)
	}
	full := struct {
		commbench.Report
		Floors    *commbench.Floors   `json:"floors,omitempty"`
		Gloo      []commbench.GlooRow `json:"gloo_all_reduce,omitempty"`
		GlooError string              `json:"gloo_error,omitempty"`
	}{Report: rep}
	if !c.Bool("skip-anchors") {
		f, err := commbench.MeasureFloors(c.Context)
		if err == nil {
			full.Floors = &f
		}
		if full.Gloo, err = commbench.MeasureGloo(c.Context, self, c.String("python"), n, cfg.Sizes, cfg.Iters, cfg.Warmup); err != nil {
			full.GlooError = err.Error()
		}
	}
	if c.String("format") == "json" {
		return json.NewEncoder(c.App.Writer).Encode(full)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "# gorun bench comm: backend %s, %d ranks, %s\n", rep.Backend, rep.World, cfg.DType)
	fmt.Fprintf(w, "%16s %14s %12s %12s %12s %8s %12s\n", "op", "size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "correct", "vs gloo")
	for _, r := range rep.Results {
		vs := ""
		for _, g := range full.Gloo {
			if r.Op == "all_reduce" && g.SizeBytes == r.SizeBytes && g.AlgBW > 0 {
				vs = fmt.Sprintf("%.2fx", r.AlgBW/g.AlgBW)
			}
		}
		fmt.Fprintf(w, "%16s %14d %12.1f %12.3f %12.3f %8v %12s\n", r.Op, r.SizeBytes, r.TimeUS, r.AlgBW, r.BusBW, r.Correct, vs)
	}
	for _, g := range full.Gloo {
		fmt.Fprintf(w, "# gloo all_reduce %d B: %.1f us, algbw %.3f GB/s\n", g.SizeBytes, g.TimeUS, g.AlgBW)
	}
	if full.GlooError != "" {
		fmt.Fprintf(w, "# gloo: %s\n", full.GlooError)
	}
	if f := full.Floors; f != nil {
		fmt.Fprintf(w, "# floors: memcpy %.2f GB/s; loopback TCP %.2f GB/s per stream with two opposite streams\n", f.MemcpyGBps, f.TCPStreamGBps)
	}
	if len(rep.SlowRanks) > 0 {
		fmt.Fprintf(w, "# consistently slower ranks: %v\n", rep.SlowRanks)
	}
	return nil
}

// benchCommConfig checks the flags.
func benchCommConfig(c *cli.Context) (commbench.WorkerConfig, error) {
	cfg := commbench.WorkerConfig{Iters: c.Int("iters"), Warmup: c.Int("warmup"), JSON: c.String("format") == "json"}
	cfg.Backend = c.String("backend")
	if err := world.Check(cfg.Backend); err != nil {
		return cfg, fmt.Errorf("--backend: %w", err)
	}
	if f := c.String("format"); f != "text" && f != "json" {
		return cfg, fmt.Errorf("--format=%q: want text or json", f)
	}
	if cfg.Iters < 1 || cfg.Warmup < 0 {
		return cfg, fmt.Errorf("--iters must be at least 1 and --warmup at least 0")
	}
	var err error
	if cfg.DType, err = comm.ParseDType(c.String("dtype")); err != nil {
		return cfg, fmt.Errorf("--dtype: %w", err)
	}
	for _, op := range strings.Split(c.String("ops"), ",") {
		op = strings.TrimSpace(op)
		if !contains(commbench.Ops, op) {
			return cfg, fmt.Errorf("--ops: %q: want some of %s", op, strings.Join(commbench.Ops, ", "))
		}
		cfg.Ops = append(cfg.Ops, op)
	}
	for _, s := range strings.Split(c.String("sizes"), ",") {
		b, err := memory.ParseBytes(strings.TrimSpace(s))
		if err != nil {
			return cfg, fmt.Errorf("--sizes: %w", err)
		}
		cfg.Sizes = append(cfg.Sizes, int64(b))
	}
	return cfg, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
