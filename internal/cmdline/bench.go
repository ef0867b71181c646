package cmdline

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/bench"
)

// benchCommand groups the benchmarks; each measures its anchor in the
// same run.
func benchCommand(opts Options) *cli.Command {
	rdzv := placeholder("rendezvous", "time N agents through the etcd rendezvous against the etcd floor (--agents N, --format json)")
	leases := placeholder("leases", "what keeping N nodes' leases alive costs the store, against how fast a silent node is dropped (--nodes, --ttl)")
	commBench := placeholder("comm", "time collectives between N workers launched by gorun, like nccl-tests, against gloo and this machine's floors")
	if opts.Companion != nil {
		rdzv = opts.Companion.BenchRendezvousCommand()
		leases = opts.Companion.BenchLeasesCommand()
		commBench = opts.Companion.BenchCommCommand()
	}
	return &cli.Command{
		Name:            "bench",
		Usage:           "measure gorun against its anchors (torchrun) in the same run",
		HideHelpCommand: true,
		Subcommands:     []*cli.Command{benchLaunchCommand(), rdzv, leases, benchMemoryCommand(), commBench, benchSpareCommand(), benchRecoveryCommand(), benchProbeCommand()},
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
				return Usagef("--runs must be at least 1 and --warmup at least 0")
			}
			self, err := os.Executable()
			if err != nil {
				return cli.Exit(message(err), 1)
			}
			cfg := bench.LaunchConfig{
				Gorun: self, Python: c.String("python"), Runs: c.Int("runs"), Warmup: c.Int("warmup"),
				SkipTorchrun: c.Bool("skip-torchrun"), Notes: c.App.ErrWriter,
			}
			res, err := bench.RunLaunch(c.Context, cfg)
			if err != nil {
				return cli.Exit("bench launch: "+message(err), 1)
			}
			return reportBench(c, "bench launch", res, res.Markdown(time.Now(), cfg.Runs))
		},
	}
}

// defaultPython is the interpreter a launch would use: torchrun's
// PYTHON_EXEC where set, else python3 on PATH (the active virtual or conda
// environment's, where PyTorch usually lives).
func defaultPython() string {
	if p := os.Getenv("PYTHON_EXEC"); p != "" {
		return p
	}
	return "python3"
}

func benchSpareCommand() *cli.Command {
	return &cli.Command{
		Name:  "spare",
		Usage: "node loss -> training again: a hot spare taking the lost node's place vs a job that shrinks (3 and 2 local agents)",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "runs", Value: 3, Usage: "measured losses per case"},
			&cli.DurationFlag{Name: "lease-ttl", Value: 2 * time.Second, Usage: "the jobs' --rdzv-conf lease_ttl (how long a lost node takes to be seen)"},
			&cli.DurationFlag{Name: "last-call", Value: 5 * time.Second, Usage: "the jobs' --rdzv-conf last_call_timeout"},
			&cli.StringFlag{Name: "write", Usage: "update this markdown file's spare section (e.g. docs/benchmarks.md)"},
		},
		Action: func(c *cli.Context) error {
			if c.Int("runs") < 1 || c.Duration("lease-ttl") < time.Second || c.Duration("last-call") <= 0 {
				return Usagef("--runs must be at least 1, --lease-ttl at least 1s, --last-call above 0")
			}
			self, err := os.Executable()
			if err != nil {
				return cli.Exit(message(err), 1)
			}
			cfg := bench.SpareConfig{Gorun: self, Runs: c.Int("runs"), LeaseTTL: c.Duration("lease-ttl"), LastCall: c.Duration("last-call"), Notes: c.App.ErrWriter}
			res, err := bench.RunSpare(c.Context, cfg)
			if err != nil {
				return cli.Exit("bench spare: "+message(err), 1)
			}
			return reportBench(c, "bench spare", res, res.Markdown(time.Now(), cfg.Runs))
		},
	}
}

func benchProbeCommand() *cli.Command {
	return &cli.Command{
		Name:  "probe",
		Usage: "the cost per step of the worker probe and straggler watch on a 3-rank PyTorch DDP job, against the same job with --worker-probe=off",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "python", Value: defaultPython(), Usage: "interpreter for the workers (it needs torch)"},
			&cli.StringFlag{Name: "script", Value: "tests/hangs/train_faults.py", Usage: "the training loop"},
			&cli.Float64Flag{Name: "step-time", Value: 0.02, Usage: "seconds of work a step"},
			&cli.IntFlag{Name: "runs", Value: 3, Usage: "measured runs per case"},
			&cli.StringFlag{Name: "write", Usage: "update this markdown file's probe section (e.g. docs/benchmarks.md)"},
		},
		Action: func(c *cli.Context) error {
			if c.Int("runs") < 1 {
				return Usagef("--runs=%d: want at least 1", c.Int("runs"))
			}
			if c.Float64("step-time") < 0 {
				return Usagef("--step-time=%v: want 0 or more seconds", c.Float64("step-time"))
			}
			if _, err := os.Stat(c.String("script")); err != nil {
				return Usagef("--script=%q: %v", c.String("script"), err)
			}
			self, err := os.Executable()
			if err != nil {
				return cli.Exit(message(err), 1)
			}
			cfg := bench.ProbeConfig{Gorun: self, Python: c.String("python"), Script: c.String("script"), StepTime: c.Float64("step-time"),
				Short: 20, Long: 220, Runs: c.Int("runs"), Notes: c.App.ErrWriter}
			res, err := bench.RunProbe(c.Context, cfg)
			if err != nil {
				return cli.Exit("bench probe: "+message(err), 1)
			}
			return reportBench(c, "bench probe", res, res.Markdown(time.Now(), cfg.Runs))
		},
	}
}

func benchRecoveryCommand() *cli.Command {
	return &cli.Command{
		Name:  "recovery",
		Usage: "fault -> training again, gorun, torchrun and NVIDIA's ft_launcher in the same run: node kill, worker kill and worker hang of a 3-agent PyTorch job",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "python", Value: defaultPython(), Usage: "interpreter for the workers and torchrun (it needs torch)"},
			&cli.StringFlag{Name: "lighthouse", Value: "auto", Usage: "torchft's torchft_lighthouse (make rivals-python): a path, auto (the one beside --python, if there) or none"},
			&cli.StringFlag{Name: "only", Usage: "measure only these launchers (torchrun, ft_launcher, torchft, gorun, \"gorun --warm-start\") and faults (node-kill, worker-kill, worker-hang, node-kill-spare, node-cut), comma-separated"},
			&cli.StringFlag{Name: "ft-launcher", Value: "auto", Usage: "NVIDIA's ft_launcher (nvidia-resiliency-ext; make rivals-python): a path, auto (the one beside --python, if there) or none"},
			&cli.IntFlag{Name: "runs", Value: 3, Usage: "measured faults per launcher and fault"},
			&cli.BoolFlag{Name: "skip-torchrun", Usage: "measure gorun only"},
			&cli.StringFlag{Name: "write", Usage: "update this markdown file's recovery section (e.g. docs/benchmarks.md)"},
		},
		Action: func(c *cli.Context) error {
			if c.Int("runs") < 1 {
				return Usagef("--runs=%d: want at least 1", c.Int("runs"))
			}
			self, err := os.Executable()
			if err != nil {
				return cli.Exit(message(err), 1)
			}
			cfg := bench.RecoveryConfig{Gorun: self, Python: c.String("python"), Runs: c.Int("runs"), SkipTorchrun: c.Bool("skip-torchrun"), Notes: c.App.ErrWriter}
			cfg.FTLauncher = besidePython(c.String("ft-launcher"), cfg.Python, "ft_launcher")
			cfg.Lighthouse = besidePython(c.String("lighthouse"), cfg.Python, "torchft_lighthouse")
			if v := c.String("only"); v != "" {
				cfg.Only = strings.Split(v, ",")
			}
			res, err := bench.RunRecovery(c.Context, cfg)
			if err != nil {
				return cli.Exit("bench recovery: "+message(err), 1)
			}
			return reportBench(c, "bench recovery", res, res.Markdown(time.Now(), cfg.Runs))
		},
	}
}

// reportBench ends a benchmark: its result as JSON on stdout, its table
// on stderr, and, with --write, the table in that file's section named
// section.
func reportBench(c *cli.Context, section string, res any, md string) error {
	if err := json.NewEncoder(c.App.Writer).Encode(res); err != nil {
		return cli.Exit(message(err), 1)
	}
	fmt.Fprintln(c.App.ErrWriter, "\n"+md)
	return WriteBenchSection(c, section, md)
}

// WriteBenchSection puts md in the section named section of the file
// --write names, if any.
func WriteBenchSection(c *cli.Context, section, md string) error {
	if path := c.String("write"); path != "" {
		if err := bench.UpdateSection(path, section, md); err != nil {
			return cli.Exit(section+": "+message(err), 1)
		}
	}
	return nil
}

// BenchFormat is --format: json (one object per result) or text.
func BenchFormat(c *cli.Context) (string, error) {
	format := c.String("format")
	if format != "json" && format != "text" {
		return "", Usagef("--format=%q: want json or text", format)
	}
	return format, nil
}

// EmitBenchResult writes one result on stdout: as a JSON object, or as
// its line of text.
func EmitBenchResult(c *cli.Context, format string, res any, text string) error {
	if format == "json" {
		if err := json.NewEncoder(c.App.Writer).Encode(res); err != nil {
			return cli.Exit(message(err), 1)
		}
		return nil
	}
	fmt.Fprintln(c.App.Writer, text)
	return nil
}

// fileExists says whether path names a file (or a link to one).
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// besidePython resolves a rival's program flag: none, auto (name beside
// the interpreter python, where it is), or a path.
func besidePython(flag, python, name string) string {
	switch flag {
	case "none":
		return ""
	case "auto":
		if py, err := exec.LookPath(python); err == nil {
			if p := filepath.Join(filepath.Dir(py), name); fileExists(p) {
				return p
			}
		}
		return ""
	}
	return flag
}
