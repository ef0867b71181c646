package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LaunchConfig configures the launch benchmark.
type LaunchConfig struct {
	// Gorun is the gorun binary to measure.
	Gorun string
	// Python runs the workers and torchrun.
	Python string
	// Runs and Warmup count the measured and the discarded runs of each
	// case.
	Runs, Warmup int
	// SkipTorchrun leaves out the anchor (e.g. torch is not installed).
	SkipTorchrun bool
	// Progress receives a line per case.
	Progress io.Writer
}

// LaunchResult holds the launch benchmark's figures.
type LaunchResult struct {
	Machine Machine `json:"machine"`
	// Torchrun says which torchrun was measured, or why none was.
	Torchrun string `json:"torchrun"`
	// Empty 2-worker job, start of the launcher to its exit.
	EmptyGorun    Stats `json:"empty_job_gorun"`
	EmptyTorchrun Stats `json:"empty_job_torchrun"`
	EmptyBare     Stats `json:"empty_job_bare_processes"`
	// Failure of rank 1 to the first statement of its replacement, with
	// rank 0 still running (the launcher must stop it) and already done.
	RestartGorun        Stats `json:"restart_gorun_rank0_running"`
	RestartTorchrun     Stats `json:"restart_torchrun_rank0_running"`
	RestartGorunDone    Stats `json:"restart_gorun_rank0_done"`
	RestartTorchrunDone Stats `json:"restart_torchrun_rank0_done"`
	// RestartMinimal is the same gap under the least a supervisor can do:
	// reap the failed worker, kill the other, start two replacements.
	RestartMinimal Stats `json:"restart_minimal_supervisor"`
	// Interpreter is the start-up of the worker interpreter alone, which
	// every replacement pays.
	Interpreter Stats `json:"python_startup"`
	// Overhead is gorun's own launch cost: two /bin/true workers against
	// a shell starting the same two processes.
	Overhead Overhead `json:"overhead"`
}

// overheadRuns is how many runs the overhead case makes per measured run
// of the others: each takes milliseconds, and its gap is a few.
const overheadRuns = 5

// launcher is one launcher command line builder.
type launcher struct {
	name string
	argv func(restart bool, script string) []string
}

// RunLaunch measures the empty job and the failure-to-replacement gap for
// gorun and torchrun, alternating them run by run so that both see the same
// machine load, plus two bare interpreter processes as the floor.
func RunLaunch(ctx context.Context, cfg LaunchConfig) (LaunchResult, error) {
	res := LaunchResult{Machine: Describe(ctx, cfg.Python)}
	dir, err := os.MkdirTemp("", "gorun-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	noop, fail := filepath.Join(dir, "noop.py"), filepath.Join(dir, "fail_once.py")
	for path, body := range map[string]string{noop: noopWorker, fail: failOnceWorker} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return res, err
		}
	}

	gorun := launcher{"gorun", func(restart bool, script string) []string {
		argv := []string{cfg.Gorun, "--standalone", "--nproc-per-node=2", "--python", cfg.Python}
		if restart {
			argv = append(argv, "--max-restarts=1")
		}
		return append(argv, script)
	}}
	launchers := []launcher{gorun}
	res.Torchrun = "not measured (--skip-torchrun)"
	if !cfg.SkipTorchrun {
		res.Torchrun, err = torchrunVersion(ctx, cfg.Python)
		if err != nil {
			res.Torchrun = "not measured: " + err.Error()
		} else {
			launchers = append(launchers, launcher{"torchrun", func(restart bool, script string) []string {
				argv := []string{cfg.Python, "-c", torchrunMain, "--standalone", "--nproc_per_node=2", "--monitor_interval=0.1"}
				if restart {
					argv = append(argv, "--max_restarts=1")
				}
				return append(argv, script)
			}})
		}
	}
	progress := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", a...)
		}
	}

	// gorun's own overhead, with workers that cost nothing.
	res.Overhead, err = measureOverhead(ctx, cfg.Gorun, max(overheadRuns*cfg.Runs, 30), max(cfg.Warmup, 3))
	if err != nil {
		return res, fmt.Errorf("launch overhead: %w", err)
	}
	progress("%s", res.Overhead)

	// Empty job.
	empty := map[string]*Sample{"gorun": {}, "torchrun": {}, "bare": {}}
	bare := []string{cfg.Python, "-u", noop}
	for i := range cfg.Warmup + cfg.Runs {
		for _, l := range launchers {
			d, err := timeCommand(ctx, l.argv(false, noop), nil)
			if err != nil {
				return res, fmt.Errorf("%s empty job: %w", l.name, err)
			}
			if i >= cfg.Warmup {
				*empty[l.name] = append(*empty[l.name], d)
			}
		}
		d, err := timeBare(ctx, bare, 2)
		if err != nil {
			return res, fmt.Errorf("bare processes: %w", err)
		}
		if i >= cfg.Warmup {
			*empty["bare"] = append(*empty["bare"], d)
		}
	}
	res.EmptyGorun, res.EmptyTorchrun, res.EmptyBare = empty["gorun"].Stats(), empty["torchrun"].Stats(), empty["bare"].Stats()
	progress("empty 2-worker job: gorun %s, torchrun %s, bare processes %s", res.EmptyGorun, res.EmptyTorchrun, res.EmptyBare)

	// Failure -> replacement.
	for _, variant := range []struct {
		sleep string
		out   map[string]*Stats
	}{
		{"30", map[string]*Stats{"gorun": &res.RestartGorun, "torchrun": &res.RestartTorchrun}},
		{"0", map[string]*Stats{"gorun": &res.RestartGorunDone, "torchrun": &res.RestartTorchrunDone}},
	} {
		gaps := map[string]*Sample{"gorun": {}, "torchrun": {}}
		for i := range cfg.Warmup + cfg.Runs {
			for _, l := range launchers {
				ts := filepath.Join(dir, fmt.Sprintf("ts-%s-%s-%d", l.name, variant.sleep, i))
				env := []string{"BENCH_TS_FILE=" + ts, "SLEEP_RANK0=" + variant.sleep}
				if _, err := timeCommand(ctx, l.argv(true, fail), env); err != nil {
					return res, fmt.Errorf("%s restart: %w", l.name, err)
				}
				gap, err := restartGap(ts)
				if err != nil {
					return res, fmt.Errorf("%s restart: %w", l.name, err)
				}
				if i >= cfg.Warmup {
					*gaps[l.name] = append(*gaps[l.name], gap)
				}
			}
		}
		for name, s := range gaps {
			*variant.out[name] = s.Stats()
		}
		progress("failure -> replacement's first statement (rank 0 sleeping %ss): gorun %s, torchrun %s",
			variant.sleep, variant.out["gorun"], variant.out["torchrun"])
	}

	var minimal Sample
	for i := range cfg.Warmup + cfg.Runs {
		ts := filepath.Join(dir, fmt.Sprintf("ts-minimal-%d", i))
		if err := minimalRestart(ctx, cfg.Python, fail, ts); err != nil {
			return res, fmt.Errorf("minimal supervisor: %w", err)
		}
		gap, err := restartGap(ts)
		if err != nil {
			return res, fmt.Errorf("minimal supervisor: %w", err)
		}
		if i >= cfg.Warmup {
			minimal = append(minimal, gap)
		}
	}
	res.RestartMinimal = minimal.Stats()
	progress("failure -> replacement's first statement, minimal Go supervisor: %s", res.RestartMinimal)

	var startup Sample
	for i := range cfg.Warmup + cfg.Runs {
		d, err := timeBare(ctx, bare, 1)
		if err != nil {
			return res, err
		}
		if i >= cfg.Warmup {
			startup = append(startup, d)
		}
	}
	res.Interpreter = startup.Stats()
	return res, nil
}

// minimalRestart is the floor of a restart: two workers of failOnceWorker
// (rank 0 sleeping), wait for the first exit, SIGKILL the other, start two
// replacements with TORCHELASTIC_RESTART_COUNT=1 and wait for them.
func minimalRestart(ctx context.Context, python, script, tsFile string) error {
	start := func(rank, restart int) (*exec.Cmd, error) {
		cmd := exec.CommandContext(ctx, python, "-u", script)
		cmd.Env = append(benchEnv(), "OMP_NUM_THREADS=1", "BENCH_TS_FILE="+tsFile, "SLEEP_RANK0=30",
			"RANK="+strconv.Itoa(rank), "TORCHELASTIC_RESTART_COUNT="+strconv.Itoa(restart))
		return cmd, cmd.Start()
	}
	exited := make(chan int, 2)
	var first [2]*exec.Cmd
	for r := range first {
		c, err := start(r, 0)
		if err != nil {
			return err
		}
		first[r] = c
		go func() { _ = c.Wait(); exited <- r }()
	}
	failed := <-exited
	_ = first[1-failed].Process.Kill()
	<-exited
	var second [2]*exec.Cmd
	for r := range second {
		c, err := start(r, 1)
		if err != nil {
			return err
		}
		second[r] = c
	}
	for _, c := range second {
		if err := c.Wait(); err != nil {
			return err
		}
	}
	return nil
}

// timeCommand runs argv to completion, output discarded, and returns the
// time from start to reap. A non-zero exit is an error.
func timeCommand(ctx context.Context, argv, env []string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(benchEnv(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%s: %w\n%s", strings.Join(argv[:min(len(argv), 3)], " "), err, lastLines(stderr.String(), 15))
	}
	return d, nil
}

// timeBare starts n copies of argv at once and waits for all: what any
// launcher must at least spend.
func timeBare(ctx context.Context, argv []string, n int) (time.Duration, error) {
	start := time.Now()
	cmds := make([]*exec.Cmd, n)
	for i := range cmds {
		cmds[i] = exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmds[i].Env = append(benchEnv(), "OMP_NUM_THREADS=1")
		if err := cmds[i].Start(); err != nil {
			return 0, err
		}
	}
	var errs []error
	for _, c := range cmds {
		errs = append(errs, c.Wait())
	}
	return time.Since(start), errors.Join(errs...)
}

// benchEnv is the environment of measured commands, without variables
// that would change the launchers' behaviour.
func benchEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PET_") || strings.HasPrefix(k, "GORUN_") || strings.HasPrefix(k, "TORCHELASTIC_") || k == "LOGLEVEL" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// restartGap reads a failOnceWorker log and returns the time from rank 1's
// failure to its replacement's first statement.
func restartGap(path string) (time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var failAt, startAt float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 {
			continue
		}
		t, err := strconv.ParseFloat(fields[3], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
		}
		switch {
		case fields[0] == "fail" && fields[1] == "1":
			failAt = t
		case fields[0] == "start" && fields[1] == "1" && fields[2] == "1":
			startAt = t
		}
	}
	if failAt == 0 || startAt == 0 {
		return 0, fmt.Errorf("%s: no failure and restart of rank 1 recorded", path)
	}
	return time.Duration((startAt - failAt) * float64(time.Second)), nil
}

// torchrunVersion checks that python can run torchrun and returns torch's
// version.
func torchrunVersion(ctx context.Context, python string) (string, error) {
	out, err := exec.CommandContext(ctx, python, "-c", "import torch, torch.distributed.run; print(torch.__version__)").Output()
	if err != nil {
		return "", fmt.Errorf("%s cannot import torch.distributed.run (install python3-torch)", python)
	}
	return "torchrun of torch " + strings.TrimSpace(string(out)) + " (" + python + "), --monitor_interval=0.1", nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
