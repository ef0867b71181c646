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
	// Notes receives a line per case.
	Notes io.Writer
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
	b := &launchBench{cfg: cfg, dir: dir, noop: filepath.Join(dir, "noop.py"), fail: filepath.Join(dir, "fail_once.py")}
	for path, body := range map[string]string{b.noop: noopWorker, b.fail: failOnceWorker} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return res, err
		}
	}
	res.Torchrun = b.chooseLaunchers(ctx)

	// gorun's own overhead, with workers that cost nothing.
	res.Overhead, err = measureOverhead(ctx, cfg.Gorun, max(overheadRuns*cfg.Runs, 30), max(cfg.Warmup, 3))
	if err != nil {
		return res, fmt.Errorf("launch overhead: %w", err)
	}
	b.note("%s", res.Overhead)
	if err := b.emptyJob(ctx, &res); err != nil {
		return res, err
	}
	if err := b.restarts(ctx, &res); err != nil {
		return res, err
	}
	if res.RestartMinimal, err = b.sample(func(i int) (time.Duration, error) {
		ts := filepath.Join(dir, fmt.Sprintf("ts-minimal-%d", i))
		if err := minimalRestart(ctx, cfg.Python, b.fail, ts); err != nil {
			return 0, fmt.Errorf("minimal supervisor: %w", err)
		}
		gap, err := restartGap(ts)
		if err != nil {
			return 0, fmt.Errorf("minimal supervisor: %w", err)
		}
		return gap, nil
	}); err != nil {
		return res, err
	}
	b.note("failure -> replacement's first statement, minimal Go supervisor: %s", res.RestartMinimal)
	res.Interpreter, err = b.sample(func(int) (time.Duration, error) { return timeBare(ctx, b.bare(), 1) })
	return res, err
}

// launchBench is one run of RunLaunch: its settings, its folder with the
// workers' scripts, and the launchers it compares.
type launchBench struct {
	cfg        LaunchConfig
	dir        string
	noop, fail string // the scripts: a worker that does nothing, one that fails once
	launchers  []launcher
}

// note writes a step's result to Notes, when the caller gave one.
func (b *launchBench) note(format string, a ...any) {
	if b.cfg.Notes != nil {
		fmt.Fprintf(b.cfg.Notes, format+"\n", a...)
	}
}

// bare is two (or one) bare interpreters running the empty worker.
func (b *launchBench) bare() []string { return []string{b.cfg.Python, "-u", b.noop} }

// chooseLaunchers sets the launchers to compare, gorun and, unless
// skipped or missing, torchrun; it returns torchrun's version or why it
// is not measured.
func (b *launchBench) chooseLaunchers(ctx context.Context) string {
	cfg := b.cfg
	b.launchers = []launcher{{"gorun", func(restart bool, script string) []string {
		argv := []string{cfg.Gorun, "--standalone", "--nproc-per-node=2", "--python", cfg.Python}
		if restart {
			argv = append(argv, "--max-restarts=1")
		}
		return append(argv, script)
	}}}
	if cfg.SkipTorchrun {
		return "not measured (--skip-torchrun)"
	}
	version, err := torchrunVersion(ctx, cfg.Python)
	if err != nil {
		return "not measured: " + err.Error()
	}
	b.launchers = append(b.launchers, launcher{"torchrun", func(restart bool, script string) []string {
		argv := []string{cfg.Python, "-c", torchrunMain, "--standalone", "--nproc_per_node=2", "--monitor_interval=0.1"}
		if restart {
			argv = append(argv, "--max_restarts=1")
		}
		return append(argv, script)
	}})
	return version
}

// sample runs measure Warmup+Runs times and keeps the last Runs.
func (b *launchBench) sample(measure func(i int) (time.Duration, error)) (Stats, error) {
	var s Sample
	for i := range b.cfg.Warmup + b.cfg.Runs {
		d, err := measure(i)
		if err != nil {
			return Stats{}, err
		}
		if i >= b.cfg.Warmup {
			s = append(s, d)
		}
	}
	return s.Stats(), nil
}

// emptyJob times a 2-worker job whose workers do nothing, under each
// launcher and as two bare interpreters, interleaved.
func (b *launchBench) emptyJob(ctx context.Context, res *LaunchResult) error {
	empty := map[string]*Sample{"gorun": {}, "torchrun": {}, "bare": {}}
	for i := range b.cfg.Warmup + b.cfg.Runs {
		for _, l := range b.launchers {
			d, err := timeCommand(ctx, l.argv(false, b.noop), nil)
			if err != nil {
				return fmt.Errorf("%s empty job: %w", l.name, err)
			}
			if i >= b.cfg.Warmup {
				*empty[l.name] = append(*empty[l.name], d)
			}
		}
		d, err := timeBare(ctx, b.bare(), 2)
		if err != nil {
			return fmt.Errorf("bare processes: %w", err)
		}
		if i >= b.cfg.Warmup {
			*empty["bare"] = append(*empty["bare"], d)
		}
	}
	res.EmptyGorun, res.EmptyTorchrun, res.EmptyBare = empty["gorun"].Stats(), empty["torchrun"].Stats(), empty["bare"].Stats()
	b.note("empty 2-worker job: gorun %s, torchrun %s, bare processes %s", res.EmptyGorun, res.EmptyTorchrun, res.EmptyBare)
	return nil
}

// restarts times failure -> the replacement's first statement under each
// launcher, with rank 0 busy (sleeping) and done.
func (b *launchBench) restarts(ctx context.Context, res *LaunchResult) error {
	for _, variant := range []struct {
		sleep string
		out   map[string]*Stats
	}{
		{"30", map[string]*Stats{"gorun": &res.RestartGorun, "torchrun": &res.RestartTorchrun}},
		{"0", map[string]*Stats{"gorun": &res.RestartGorunDone, "torchrun": &res.RestartTorchrunDone}},
	} {
		gaps := map[string]*Sample{"gorun": {}, "torchrun": {}}
		for i := range b.cfg.Warmup + b.cfg.Runs {
			for _, l := range b.launchers {
				ts := filepath.Join(b.dir, fmt.Sprintf("ts-%s-%s-%d", l.name, variant.sleep, i))
				env := []string{"BENCH_TS_FILE=" + ts, "SLEEP_RANK0=" + variant.sleep}
				if _, err := timeCommand(ctx, l.argv(true, b.fail), env); err != nil {
					return fmt.Errorf("%s restart: %w", l.name, err)
				}
				gap, err := restartGap(ts)
				if err != nil {
					return fmt.Errorf("%s restart: %w", l.name, err)
				}
				if i >= b.cfg.Warmup {
					*gaps[l.name] = append(*gaps[l.name], gap)
				}
			}
		}
		for name, s := range gaps {
			*variant.out[name] = s.Stats()
		}
		b.note("failure -> replacement's first statement (rank 0 sleeping %ss): gorun %s, torchrun %s",
			variant.sleep, variant.out["gorun"], variant.out["torchrun"])
	}
	return nil
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

// ftLauncherVersion describes NVIDIA's ft_launcher at path: the version of
// nvidia-resiliency-ext that python has.
func ftLauncherVersion(ctx context.Context, python, path string) (string, error) {
	if _, err := exec.LookPath(path); err != nil {
		return "", fmt.Errorf("--ft-launcher=%s: %w (make rivals-python installs it)", path, err)
	}
	v, err := packageVersion(ctx, python, "nvidia-resiliency-ext")
	if err != nil {
		return "", err
	}
	return "ft_launcher of " + v, nil
}

// packageVersion is "NAME VERSION" of a package python has.
func packageVersion(ctx context.Context, python, name string) (string, error) {
	out, err := exec.CommandContext(ctx, python, "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))", name).Output()
	if err != nil {
		return "", fmt.Errorf("%s has no %s (make rivals-python installs it): %v", python, name, err)
	}
	return name + " " + strings.TrimSpace(string(out)), nil
}
