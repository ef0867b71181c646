package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// RecoveryConfig configures `gorun bench recovery`: how long an elastic
// job stands still after a fault, gorun and torchrun in the same run, with
// the same PyTorch workers: 3 local agents (--nnodes=2:3, one gloo DDP
// worker each, 0.1-s steps) over c10d on 127.0.0.1, default settings.
type RecoveryConfig struct {
	// Gorun is the gorun binary; Python runs the workers and torchrun.
	Gorun, Python string
	// Runs is the number of measured faults per launcher and fault.
	Runs int
	// SkipTorchrun measures gorun alone.
	SkipTorchrun bool
	// Progress receives a line per run.
	Progress io.Writer
}

// RecoveryResult holds the figures, per fault and launcher.
type RecoveryResult struct {
	Machine  Machine `json:"machine"`
	Torchrun string  `json:"torchrun"`
	// NodeKill: SIGKILL of one agent and its worker, to both survivors'
	// first step in a world of 2.
	NodeKillGorun    Stats `json:"node_kill_gorun"`
	NodeKillTorchrun Stats `json:"node_kill_torchrun"`
	// WorkerKill: SIGKILL of one worker, to every worker's first step of
	// the next attempt (a worker whose steps count from 0 again).
	WorkerKillGorun    Stats `json:"worker_kill_gorun"`
	WorkerKillTorchrun Stats `json:"worker_kill_torchrun"`
	// The same with gorun --warm-start.
	NodeKillGorunWarm   Stats `json:"node_kill_gorun_warm"`
	WorkerKillGorunWarm Stats `json:"worker_kill_gorun_warm"`
	// Startup: from a round's close (the agent's spawn event) to each
	// restarted worker's first statement after its imports, over both
	// faults, without and with --warm-start.
	StartupGorun     Stats `json:"startup_gorun"`
	StartupGorunWarm Stats `json:"startup_gorun_warm"`
	// Failed counts runs that never trained again within recoveryLimit.
	Failed map[string]int `json:"failed,omitempty"`
}

// recoveryWorker trains a tiny all-reduce loop and prints each step with
// its time, world size and attempt; its first statement after its
// imports prints the time.
const recoveryWorker = `import os, time, torch, torch.distributed as dist
print(f"imported={time.time():.6f}", flush=True)
dist.init_process_group("gloo")
w, r, a = dist.get_world_size(), dist.get_rank(), os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
print(f"pid={os.getpid()} rank={r}", flush=True)
t = torch.ones(1000)
step = 0
while True:
    dist.all_reduce(t)
    print(f"t={time.time():.6f} step={step} world={w} attempt={a} rank={r}", flush=True)
    step += 1
    time.sleep(0.1)
`

// recoveryLimit bounds one run's wait for training (again).
const recoveryLimit = 3 * time.Minute

var stepLine = regexp.MustCompile(`t=([0-9.]+) step=(\d+) world=(\d+) attempt=(\d+)`)

// RunRecovery measures every fault for gorun and torchrun, alternating.
func RunRecovery(ctx context.Context, cfg RecoveryConfig) (RecoveryResult, error) {
	res := RecoveryResult{Machine: Describe(ctx, cfg.Python), Torchrun: "not measured (--skip-torchrun)", Failed: map[string]int{}}
	dir, err := os.MkdirTemp("", "gorun-bench-recovery-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "worker.py")
	if err := os.WriteFile(script, []byte(recoveryWorker), 0o644); err != nil {
		return res, err
	}
	launchers := []string{"gorun"}
	if !cfg.SkipTorchrun {
		if res.Torchrun, err = torchrunVersion(ctx, cfg.Python); err != nil {
			return res, err
		}
		launchers = []string{"torchrun", "gorun"}
	}
	launchers = append(launchers, gorunWarm)
	samples := map[string]*Sample{}
	for i := range cfg.Runs {
		for _, fault := range []string{"node-kill", "worker-kill"} {
			for _, l := range launchers {
				d, startups, err := recoverOnce(ctx, cfg, l, fault, script, i, dir)
				key := fault + " " + l
				if err != nil {
					res.Failed[key]++
					fmt.Fprintf(cfg.Progress, "bench recovery: %s, %s, run %d: %v\n", fault, l, i+1, err)
					continue
				}
				if samples[key] == nil {
					samples[key] = &Sample{}
				}
				*samples[key] = append(*samples[key], d)
				if samples["startup "+l] == nil {
					samples["startup "+l] = &Sample{}
				}
				*samples["startup "+l] = append(*samples["startup "+l], startups...)
				fmt.Fprintf(cfg.Progress, "bench recovery: %s, %s, run %d: %s\n", fault, l, i+1, ms(d))
			}
		}
	}
	stats := func(k string) Stats {
		if s := samples[k]; s != nil {
			return s.Stats()
		}
		return Stats{}
	}
	res.NodeKillGorun, res.NodeKillTorchrun = stats("node-kill gorun"), stats("node-kill torchrun")
	res.WorkerKillGorun, res.WorkerKillTorchrun = stats("worker-kill gorun"), stats("worker-kill torchrun")
	res.NodeKillGorunWarm, res.WorkerKillGorunWarm = stats("node-kill "+gorunWarm), stats("worker-kill "+gorunWarm)
	res.StartupGorun, res.StartupGorunWarm = stats("startup gorun"), stats("startup "+gorunWarm)
	return res, nil
}

// agentLog is what one agent's workers printed, as it comes.
type agentLog struct {
	mu       sync.Mutex
	steps    [][4]float64 // time, step, world, attempt
	pids     []int
	imported []float64 // each worker's first statement after its imports
}

func (l *agentLog) read(r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		line := s.Text()
		l.mu.Lock()
		if m := stepLine.FindStringSubmatch(line); m != nil {
			var v [4]float64
			for i := range v {
				v[i], _ = strconv.ParseFloat(m[i+1], 64)
			}
			l.steps = append(l.steps, v)
		} else if i := strings.Index(line, "imported="); i >= 0 {
			if t, err := strconv.ParseFloat(strings.TrimSpace(line[i+len("imported="):]), 64); err == nil {
				l.imported = append(l.imported, t)
			}
		} else if i := strings.Index(line, "pid="); i >= 0 {
			if f := strings.Fields(line[i+4:]); len(f) > 0 {
				if pid, err := strconv.Atoi(f[0]); err == nil {
					l.pids = append(l.pids, pid)
				}
			}
		}
		l.mu.Unlock()
	}
}

// first is the time of the first step that ok accepts, after not.
func (l *agentLog) first(after float64, ok func(v [4]float64) bool) (float64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.steps {
		if v[0] > after && ok(v) {
			return v[0], true
		}
	}
	return 0, false
}

// gorunWarm names gorun --warm-start among the launchers.
const gorunWarm = "gorun --warm-start"

// recoverOnce runs one job of 3 agents, waits for 10 steps in world 3,
// makes the fault on the third agent (not the store's host) and returns
// the time to training again and, for gorun, each restarted worker's
// start-up (round closed to its first statement after its imports); dir
// receives gorun's run folders.
func recoverOnce(ctx context.Context, cfg RecoveryConfig, launcher, fault, script string, run int, dir string) (time.Duration, []time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ep, id := "127.0.0.1:"+strconv.Itoa(port), fmt.Sprintf("recovery-%d-%d-%s", os.Getpid(), run, fault)
	var argv []string
	logDirs := make([]string, 3)
	if launcher != "torchrun" {
		argv = []string{cfg.Gorun, "--nnodes=2:3", "--nproc-per-node=1", "--max-restarts=3", "--rdzv-backend=c10d",
			"--rdzv-endpoint=" + ep, "--rdzv-id=" + id}
		if launcher == gorunWarm {
			argv = append(argv, "--warm-start", "--warm-imports=torch,torch.distributed")
		}
		argv = append(argv, script)
		for a := range logDirs {
			logDirs[a] = filepath.Join(dir, fmt.Sprintf("%s-%d-agent%d", id, len(launcher), a))
		}
	} else {
		argv = []string{cfg.Python, "-c", torchrunMain, "--nnodes=2:3", "--nproc_per_node=1", "--max_restarts=3", "--rdzv_backend=c10d",
			"--rdzv_endpoint=" + ep, "--rdzv_id=" + id, "--monitor_interval=0.1", script}
	}
	logs := make([]*agentLog, 3)
	cmds := make([]*exec.Cmd, 3)
	var wg sync.WaitGroup
	defer func() {
		for _, c := range cmds {
			if c != nil && c.Process != nil {
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			}
		}
		wg.Wait()
		for _, c := range cmds {
			if c != nil {
				_ = c.Wait()
			}
		}
	}()
	for a := range cmds {
		args := argv[1:]
		if logDirs[a] != "" {
			args = append([]string{"--log-dir=" + logDirs[a]}, args...)
		}
		c := exec.CommandContext(ctx, argv[0], args...)
		c.Env = append(os.Environ(), "PATH="+filepath.Dir(cfg.Python)+":"+os.Getenv("PATH"))
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := c.StdoutPipe()
		if err != nil {
			return 0, nil, err
		}
		c.Stderr = io.Discard
		if err := c.Start(); err != nil {
			return 0, nil, err
		}
		cmds[a], logs[a] = c, &agentLog{}
		wg.Go(func() { logs[a].read(out) })
		if a == 0 {
			// The first agent hosts the store (gorun's embedded etcd,
			// torchrun's TCPStore) once it listens: the agent killed is
			// another (a host's loss ends either job: its store goes).
			if err := waitUntil(ctx, time.Minute, func() bool {
				c, err := net.DialTimeout("tcp", ep, time.Second)
				if err == nil {
					c.Close()
				}
				return err == nil
			}); err != nil {
				return 0, nil, fmt.Errorf("the first agent never opened its store at %s: %w", ep, err)
			}
		}
	}
	if err := waitUntil(ctx, recoveryLimit, func() bool {
		for _, l := range logs {
			if _, ok := l.first(0, func(v [4]float64) bool { return v[1] >= 10 && v[2] == 3 }); !ok {
				return false
			}
		}
		return true
	}); err != nil {
		return 0, nil, fmt.Errorf("never trained in a world of 3: %w", err)
	}
	t0 := float64(time.Now().UnixNano()) / 1e9
	survivors := logs[:2]
	if fault == "node-kill" {
		_ = syscall.Kill(-cmds[2].Process.Pid, syscall.SIGKILL)
	} else {
		logs[2].mu.Lock()
		pids := logs[2].pids
		logs[2].mu.Unlock()
		if len(pids) == 0 {
			return 0, nil, fmt.Errorf("the third agent's worker never said its pid")
		}
		_ = syscall.Kill(pids[len(pids)-1], syscall.SIGKILL)
		survivors = logs
	}
	var last float64
	err = waitUntil(ctx, recoveryLimit, func() bool {
		last = 0
		for _, l := range survivors {
			t, ok := l.first(t0, func(v [4]float64) bool {
				if fault == "node-kill" {
					return v[2] == 2
				}
				// A new worker: its steps count from 0 again (torchrun
				// restarts the others' workers without counting a
				// restart for them, so the attempt number does not tell).
				return v[1] < 10
			})
			if !ok {
				return false
			}
			last = max(last, t)
		}
		return true
	})
	if err != nil {
		return 0, nil, fmt.Errorf("never trained again: %w", err)
	}
	var startups []time.Duration
	for a, l := range survivors {
		if logDirs[a] == "" {
			continue
		}
		spawn, err := spawnAfter(logDirs[a], t0)
		if err != nil {
			return 0, nil, err
		}
		l.mu.Lock()
		for _, t := range l.imported {
			if t > spawn {
				startups = append(startups, time.Duration((t-spawn)*1e9))
				break
			}
		}
		l.mu.Unlock()
	}
	return time.Duration((last - t0) * 1e9), startups, nil
}

// spawnAfter is the time of the first spawn event after t0 in the
// events.jsonl of the run folder under logDir.
func spawnAfter(logDir string, t0 float64) (float64, error) {
	files, _ := filepath.Glob(filepath.Join(logDir, "*", "events.jsonl"))
	if len(files) != 1 {
		return 0, fmt.Errorf("%s: %d run folders with events.jsonl, want 1", logDir, len(files))
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		var e struct {
			Time  time.Time `json:"time"`
			Event string    `json:"event"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Event != "spawn" {
			continue
		}
		if t := float64(e.Time.UnixNano()) / 1e9; t > t0 {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%s: no spawn after the fault", files[0])
}

// waitUntil polls cond every 20 ms until it holds, limit passes or ctx
// ends.
func waitUntil(ctx context.Context, limit time.Duration, cond func() bool) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			return fmt.Errorf("not within %v", limit)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Markdown renders the result as docs/benchmarks.md's recovery section.
func (r RecoveryResult) Markdown(when time.Time, runs int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Recovery (`gorun bench recovery`)\n\n")
	fmt.Fprintf(&b, "Measured %s on %s; %s. The same job under each launcher, alternating run by run: 3 local agents (`--nnodes=2:3`, one PyTorch gloo DDP worker each, an all-reduce every 0.1 s), c10d on 127.0.0.1, default settings (gorun: lease 4 s; torchrun: its own). %d runs per case; median [min-max].\n\n",
		when.UTC().Format("2006-01-02 15:04 MST"), r.Machine, r.Torchrun, runs)
	b.WriteString("| fault | gorun | torchrun | torchrun / gorun |\n|---|---|---|---|\n")
	row := func(name string, g, t Stats) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, secs(g), secs(t), ratio(t, g))
	}
	row("node kill (agent and worker, SIGKILL) -> both survivors' first step in a world of 2", r.NodeKillGorun, r.NodeKillTorchrun)
	row("worker kill (SIGKILL) -> every worker's first step of the next attempt", r.WorkerKillGorun, r.WorkerKillTorchrun)
	b.WriteString("\nWith `gorun --warm-start --warm-imports=torch,torch.distributed` (the same job, the same runs), and each restarted worker's start-up: from its round's close (the agent's spawn event in events.jsonl) to the script's first statement after `import torch`:\n\n")
	b.WriteString("| | gorun | gorun --warm-start | gorun / warm |\n|---|---|---|---|\n")
	warmRow := func(name string, cold, warm Stats, show func(Stats) string) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, show(cold), show(warm), ratio(cold, warm))
	}
	warmRow("node kill -> training again", r.NodeKillGorun, r.NodeKillGorunWarm, secs)
	warmRow("worker kill -> training again", r.WorkerKillGorun, r.WorkerKillGorunWarm, secs)
	warmRow("round closed -> restarted worker's first statement after its imports", r.StartupGorun, r.StartupGorunWarm, millis)
	if len(r.Failed) > 0 {
		fmt.Fprintf(&b, "\nRuns that never trained again within %v: %v.\n", recoveryLimit, r.Failed)
	}
	return b.String()
}

// millis renders stats in milliseconds.
func millis(st Stats) string {
	if st.N == 0 {
		return "n/a"
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return fmt.Sprintf("%.0f ms [%.0f-%.0f]", ms(st.Median), ms(st.Min), ms(st.Max))
}

// secs renders stats in seconds.
func secs(st Stats) string {
	if st.N == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f s [%.2f-%.2f]", st.Median.Seconds(), st.Min.Seconds(), st.Max.Seconds())
}
