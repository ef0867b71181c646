package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ProbeConfig is what `gorun bench probe` measures: the cost per step of
// gorun's worker probe and straggler watch (and the PyTorch flight
// recorder it turns on) on a small DDP job, against the same job with
// --worker-probe=off.
type ProbeConfig struct {
	Gorun, Python string
	// Script is the training loop (tests/hangs/train_faults.py): 3 ranks,
	// only rank 0 prints, StepTime of work a step.
	Script   string
	StepTime float64
	// Short and Long are the two step counts; their difference in wall
	// time, over their difference in steps, is the time a step takes,
	// start-up left out.
	Short, Long int
	Runs        int
	Notes       io.Writer
}

// ProbeResult is the time a step takes with the probe off (the anchor)
// and on.
type ProbeResult struct {
	Machine  Machine `json:"machine"`
	Off      Stats   `json:"off_per_step"`
	On       Stats   `json:"on_per_step"`
	StepTime float64 `json:"step_work_seconds"`
	Steps    [2]int  `json:"steps"`
	Python   string  `json:"python"`
}

// RunProbe measures, alternating the cases run by run.
func RunProbe(ctx context.Context, cfg ProbeConfig) (ProbeResult, error) {
	res := ProbeResult{Machine: Describe(ctx, cfg.Python), StepTime: cfg.StepTime, Steps: [2]int{cfg.Short, cfg.Long}, Python: cfg.Python}
	var off, on Sample
	for run := range cfg.Runs {
		for _, probe := range []string{"off", "on"} {
			var wall [2]time.Duration
			for i, steps := range []int{cfg.Short, cfg.Long} {
				d, err := probeJob(ctx, cfg, probe, steps)
				if err != nil {
					return res, err
				}
				wall[i] = d
			}
			per := (wall[1] - wall[0]) / time.Duration(cfg.Long-cfg.Short)
			fmt.Fprintf(cfg.Notes, "bench probe: run %d, --worker-probe=%s: %v a step\n", run+1, probe, per)
			if probe == "off" {
				off = append(off, per)
			} else {
				on = append(on, per)
			}
		}
	}
	res.Off, res.On = off.Stats(), on.Stats()
	return res, nil
}

// probeJob runs the job once and returns its wall time.
func probeJob(ctx context.Context, cfg ProbeConfig, probe string, steps int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.Gorun, "--nproc-per-node=3", "--worker-probe="+probe, "--python", cfg.Python, cfg.Script,
		"--steps", strconv.Itoa(steps), "--step-time", strconv.FormatFloat(cfg.StepTime, 'f', -1, 64), "--print-every", "1000000")
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("--worker-probe=%s, %d steps: %v\n%s", probe, steps, err, out.String())
	}
	return time.Since(start), nil
}

// Markdown is the result's section of docs/benchmarks.md.
func (r ProbeResult) Markdown(when time.Time, runs int) string {
	var b strings.Builder
	b.WriteString("## The worker probe and straggler watch (`gorun bench probe`)\n\n")
	fmt.Fprintf(&b, "Measured %s, %d runs per case, the cases alternating run by run.\n\n", when.UTC().Format("2006-01-02 15:04 MST"), runs)
	fmt.Fprintf(&b, "- Machine: %s\n", r.Machine)
	fmt.Fprintf(&b, "- The job: `tests/hangs/train_faults.py`, 3 ranks of DDP over gloo (%s), %.0f ms of work a step, only rank 0 prints. A step's time is the difference in wall time between %d and %d steps, over %d steps: start-up left out.\n",
		r.Python, r.StepTime*1000, r.Steps[0], r.Steps[1], r.Steps[1]-r.Steps[0])
	b.WriteString("- On: gorun's probe in every rank (a snapshot a second, PyTorch's flight recorder at 512 entries, the optimizer-step hook) and the straggler watch in gorun. Off (the anchor): `--worker-probe=off`.\n\n")
	b.WriteString("| case | time a step, median [min-max] |\n|---|---|\n")
	fmt.Fprintf(&b, "| --worker-probe=off | %s |\n| --worker-probe=on | %s |\n\n", r.Off, r.On)
	if r.Off.N > 0 && r.On.N > 0 {
		d := r.On.Median - r.Off.Median
		fmt.Fprintf(&b, "The probe costs %s a step (%.2fx the step without it); the difference is within the runs' spread where it is smaller than %s.\n",
			signedMs(d), Ratio(r.On, r.Off), ms(max(r.On.Max-r.On.Min, r.Off.Max-r.Off.Min)))
	}
	return b.String()
}

func signedMs(d time.Duration) string {
	if d < 0 {
		return "-" + ms(-d)
	}
	return "+" + ms(d)
}
