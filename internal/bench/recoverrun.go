package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/internal/sys/netns"
)

// recoveryRun is one job of the recovery benchmark: its agents, one
// fault, the time to training again.
type recoveryRun struct {
	cfg      RecoveryConfig
	launcher string
	fault    fault
	script   string
	dir      string // receives gorun's run folders
	n        int
	// hosts, for a cut, runs agent i on host i.
	hosts *netns.Hosts
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

// first is the time of the first step after `after` that ok accepts.
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

// trained says whether the agent's workers trained 10 steps in a world
// of 3.
func (l *agentLog) trained() bool {
	_, ok := l.first(0, func(v [4]float64) bool { return v[1] >= 10 && v[2] == 3 })
	return ok
}

// argv is the launcher's command line for agent a (its --local-addr and
// --log-dir), with the store at ep.
func (r *recoveryRun) argv(a int, ep, id string) []string {
	switch r.launcher {
	case torchrunName:
		return []string{r.cfg.Python, "-c", torchrunMain, "--nnodes=2:3", "--nproc_per_node=1", "--max_restarts=3", "--rdzv_backend=c10d",
			"--rdzv_endpoint=" + ep, "--rdzv_id=" + id, "--monitor_interval=0.1", r.script}
	case torchftName:
		// One replica group per agent, each its own single-node job.
		return []string{r.cfg.Python, "-c", torchrunMain, "--standalone", "--nproc_per_node=1", "--max_restarts=3",
			"--monitor_interval=0.1", r.torchftScript()}
	case ftLauncherName:
		// Its defaults otherwise: NVIDIA's recommended settings.
		return []string{r.cfg.FTLauncher, "--nnodes=2:3", "--nproc-per-node=1", "--max-restarts=3", "--rdzv-backend=c10d",
			"--rdzv-endpoint=" + ep, "--rdzv-id=" + id, r.script}
	}
	argv := []string{r.cfg.Gorun, "--log-dir=" + r.logDir(a), "--nnodes=2:3", "--nproc-per-node=1", "--max-restarts=3",
		"--rdzv-backend=c10d", "--rdzv-endpoint=" + ep, "--rdzv-id=" + id}
	if r.fault.hang {
		argv = append(argv, "--hang-timeout="+hangTimeout)
	}
	if r.hosts != nil {
		argv = append(argv, "--local-addr="+r.hosts.Addr(a))
	}
	if r.launcher == gorunWarm {
		argv = append(argv, "--warm-start", "--warm-imports=torch,torch.distributed")
	}
	return append(argv, r.script)
}

// logDir is gorun agent a's --log-dir.
func (r *recoveryRun) logDir(a int) string {
	return filepath.Join(r.dir, fmt.Sprintf("%s-%d-%d-agent%d", r.fault.name, len(r.launcher), r.n, a))
}

// measure runs the job, waits for 10 steps in a world of 3, makes the
// fault on an agent that does not host the store (and is no spare), and
// returns the time to training again and, for gorun, each restarted
// worker's start-up (its round's close to its first statement after its
// imports) and what the goodput report of the first survivor counts as
// lost to the fault.
func (r *recoveryRun) measure(ctx context.Context) (time.Duration, []time.Duration, time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	host := "127.0.0.1"
	if r.hosts != nil {
		host = r.hosts.Addr(0)
	}
	ep, id := net.JoinHostPort(host, strconv.Itoa(port)), fmt.Sprintf("recovery-%d-%d-%s", os.Getpid(), r.n, r.fault.name)
	ag := &recoveryAgents{script: filepath.Dir(r.script), hosts: r.hosts, victim: -1, logs: make([]*agentLog, r.fault.agents), cmds: make([]*exec.Cmd, r.fault.agents)}
	defer ag.stop()
	if r.launcher == torchftName {
		// torchft's replica groups meet at its lighthouse, not at a
		// rendezvous: ep is the lighthouse's address.
		lh, err := startLighthouse(ctx, r.cfg.Lighthouse, ep)
		if err != nil {
			return 0, nil, 0, err
		}
		defer stopProcess(lh)
	}
	if err := r.startAgents(ctx, ag, ep, id); err != nil {
		return 0, nil, 0, err
	}
	// 3 agents train; with a spare, the fourth waits.
	var training []int
	if err := waitUntil(ctx, recoveryLimit, func() bool {
		training = training[:0]
		for a, l := range ag.logs {
			if l.trained() {
				training = append(training, a)
			}
		}
		return len(training) == 3
	}); err != nil {
		return 0, nil, 0, fmt.Errorf("never trained in a world of 3: %w", err)
	}
	ag.victim = training[2]
	survivors := []int{training[0], training[1]}
	for a := range ag.logs {
		if a != ag.victim && !slices.Contains(training, a) {
			survivors = append(survivors, a) // the spare
		}
	}
	t0 := float64(time.Now().UnixNano()) / 1e9
	newWorld, survivors, err := r.injectFault(ag, survivors)
	if err != nil {
		return 0, nil, 0, err
	}
	var last float64
	limit := recoveryLimit
	if r.fault.hang && rival(r.launcher) {
		limit = rivalHangLimit
	}
	err = waitUntil(ctx, limit, func() bool {
		last = 0
		for _, a := range survivors {
			t, ok := ag.logs[a].first(t0, newWorld)
			if !ok {
				return false
			}
			last = max(last, t)
		}
		return true
	})
	if err != nil {
		return 0, nil, 0, fmt.Errorf("never trained again: %w; a survivor's launcher said at the end: %s", err, tailOf(r.stderrFile(survivors[0]), 3))
	}
	if rival(r.launcher) {
		return time.Duration((last - t0) * 1e9), nil, 0, nil
	}
	startups, lost, err := r.startupsAndLoss(ag, survivors, t0)
	return time.Duration((last - t0) * 1e9), startups, lost, err
}

// recoveryAgents are one measurement's agents: their processes, the
// readers of their output, and the agent the fault hit (-1: none yet).
type recoveryAgents struct {
	// script is the workers' folder: a process whose command line holds
	// it is one of theirs.
	script  string
	hosts   *netns.Hosts
	cmds    []*exec.Cmd
	logs    []*agentLog
	readers sync.WaitGroup
	victim  int
}

// stop heals the victim's link and kills and reaps every agent.
func (ag *recoveryAgents) stop() {
	if ag.hosts != nil && ag.victim >= 0 {
		_ = ag.hosts.Heal(ag.victim)
	}
	for _, c := range ag.cmds {
		if c != nil && c.Process != nil {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
	}
	// torchrun 2.x's workers, in sessions of their own, outlive their
	// agent's group (and hold its output open): every one the run
	// started, while its command line is still the benchmark's.
	for _, l := range ag.logs {
		if l == nil {
			continue
		}
		l.mu.Lock()
		pids := slices.Clone(l.pids)
		l.mu.Unlock()
		for _, pid := range pids {
			if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), ag.script) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	ag.readers.Wait()
	for _, c := range ag.cmds {
		if c != nil {
			_ = c.Wait()
		}
	}
}

// startAgents starts the agents of the job id whose store is at ep, each
// in a process group of its own, and reads their output.
func (r *recoveryRun) startAgents(ctx context.Context, ag *recoveryAgents, ep, id string) error {
	for a := range ag.cmds {
		argv := r.argv(a, ep, id)
		var c *exec.Cmd
		env := append(os.Environ(), "PATH="+filepath.Dir(r.cfg.Python)+":"+os.Getenv("PATH"))
		if r.launcher == torchftName {
			env = append(env, "REPLICA_GROUP_ID="+strconv.Itoa(a), "TORCHFT_LIGHTHOUSE=http://"+ep)
		}
		if r.hosts != nil {
			// Gloo takes the address of the host's name, which every
			// namespace shares: its own interface instead.
			c, env = r.hosts.Command(ctx, a, argv...), append(env, "GLOO_SOCKET_IFNAME=eth0")
		} else {
			c = exec.CommandContext(ctx, argv[0], argv[1:]...)
		}
		c.Env = env
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := c.StdoutPipe()
		if err != nil {
			return err
		}
		// Kept for a run that fails: its error quotes the end.
		errLog, err := os.Create(r.stderrFile(a))
		if err != nil {
			return err
		}
		c.Stderr = errLog
		defer errLog.Close() // the child has its own copy
		if err := c.Start(); err != nil {
			return err
		}
		ag.cmds[a], ag.logs[a] = c, &agentLog{}
		ag.readers.Go(func() { ag.logs[a].read(out) })
		if a == 0 && r.launcher != torchftName {
			// The first agent hosts the store (gorun's embedded etcd,
			// torchrun's TCPStore) once it listens: the agent lost is
			// another (a host's loss ends either job: its store goes).
			if err := WaitListening(ctx, ep, time.Minute); err != nil {
				return fmt.Errorf("the first agent never opened its store at %s: %w", ep, err)
			}
		}
	}
	return nil
}

// injectFault hits ag.victim with the run's fault. It returns what a
// survivor's first step in the new world looks like and the agents that
// must reach it (a worker's own agent survives a worker's loss).
func (r *recoveryRun) injectFault(ag *recoveryAgents, survivors []int) (func([4]float64) bool, []int, error) {
	victim := ag.victim
	newWorld := func(v [4]float64) bool { return v[2] == 2 }
	if r.launcher == torchftName {
		// torchft's survivors do not restart: training again is their
		// first committed step without the lost replica, whatever the
		// fault.
		if err := r.hitReplica(ag); err != nil {
			return nil, nil, err
		}
		return newWorld, survivors, nil
	}
	switch r.fault.name {
	case "node-kill":
		ag.killNode(victim)
	case "node-cut":
		if err := r.hosts.Cut(victim); err != nil {
			return nil, nil, err
		}
	case "worker-kill", "worker-hang", "node-kill-spare":
		if r.fault.name != "node-kill-spare" {
			if err := r.hitWorker(ag, victim); err != nil {
				return nil, nil, err
			}
			survivors = append(survivors, victim)
		} else {
			ag.killNode(victim)
		}
		// A new worker: its steps count from 0 again (torchrun restarts
		// the others' workers without counting a restart for them, so
		// the attempt number does not tell).
		newWorld = func(v [4]float64) bool { return v[1] < 10 }
	}
	return newWorld, survivors, nil
}

// startupsAndLoss reads gorun's run folders after a fault at t0: each
// survivor's worker start-up (spawn to imports done) and the goodput the
// first survivor's report says was lost.
func (r *recoveryRun) startupsAndLoss(ag *recoveryAgents, survivors []int, t0 float64) ([]time.Duration, time.Duration, error) {
	var startups []time.Duration
	var lost time.Duration
	for i, a := range survivors {
		events, err := runEvents(r.logDir(a))
		if err != nil {
			return nil, 0, err
		}
		if i == 0 {
			if lost, err = goodputLost(events, t0); err != nil {
				return nil, 0, fmt.Errorf("%s: %w", r.logDir(a), err)
			}
		}
		spawn, err := spawnAfter(events, t0)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", r.logDir(a), err)
		}
		l := ag.logs[a]
		l.mu.Lock()
		for _, t := range l.imported {
			if t > spawn {
				startups = append(startups, time.Duration((t-spawn)*1e9))
				break
			}
		}
		l.mu.Unlock()
	}
	return startups, lost, nil
}

// runEvents reads the events.jsonl of the one run folder under logDir.
func runEvents(logDir string) ([]goodput.Event, error) {
	files, _ := filepath.Glob(filepath.Join(logDir, "*", goodput.EventsFile))
	if len(files) != 1 {
		return nil, fmt.Errorf("%s: %d run folders with %s, want 1", logDir, len(files), goodput.EventsFile)
	}
	f, err := os.Open(files[0])
	if err != nil {
		return nil, err
	}
	defer f.Close()
	events, err := goodput.ReadEvents(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", files[0], err)
	}
	return events, nil
}

// goodputLost is what the goodput report of a run's events counts as lost
// to the failure of the attempt that ended after t0.
func goodputLost(events []goodput.Event, t0 float64) (time.Duration, error) {
	rep, err := goodput.ComputeReport(events, time.Now(), nil)
	if err != nil {
		return 0, err
	}
	for _, fl := range rep.Failures {
		if float64(fl.To.UnixNano())/1e9 > t0 {
			return time.Duration(fl.LostSeconds * 1e9), nil
		}
	}
	return 0, errors.New("the goodput report has no failure after the fault")
}

// spawnAfter is the time of the first spawn event after t0.
func spawnAfter(events []goodput.Event, t0 float64) (float64, error) {
	for _, e := range events {
		if t := float64(e.Time.UnixNano()) / 1e9; e.Kind == goodput.EventSpawn && t > t0 {
			return t, nil
		}
	}
	return 0, errors.New("no spawn after the fault")
}

// waitUntil polls cond every 20 ms until it holds, limit passes or ctx
// ends.
func waitUntil(ctx context.Context, limit time.Duration, cond func() bool) error {
	return ctxtime.Poll(ctx, 20*time.Millisecond, limit, cond)
}

// killNode kills agent a as a node's loss would: its process group and
// its workers, which torchrun 2.x starts in sessions of their own (they
// would live on as orphans, and torchft's would go on training).
func (ag *recoveryAgents) killNode(a int) {
	_ = syscall.Kill(-ag.cmds[a].Process.Pid, syscall.SIGKILL)
	// Its current worker only: an earlier one's pid may be another
	// process's by now.
	if pid, ok := ag.logs[a].lastPid(); ok {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// lastPid is the pid of the agent's current worker, the last one that
// said it.
func (l *agentLog) lastPid() (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pids) == 0 {
		return 0, false
	}
	return l.pids[len(l.pids)-1], true
}

// hitWorker makes a worker fault on agent a's current worker: SIGKILL
// (worker-kill), or a hang file it sees at its next step and stops there
// (worker-hang).
func (r *recoveryRun) hitWorker(ag *recoveryAgents, a int) error {
	pid, ok := ag.logs[a].lastPid()
	if !ok {
		return fmt.Errorf("agent %d's worker never said its pid", a)
	}
	if r.fault.hang {
		return os.WriteFile(filepath.Join(filepath.Dir(r.script), fmt.Sprintf("hang.%d", pid)), nil, 0o644)
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// WaitListening waits until something accepts TCP connections at addr.
func WaitListening(ctx context.Context, addr string, limit time.Duration) error {
	return waitUntil(ctx, limit, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// stderrFile is where agent a's standard error goes.
func (r *recoveryRun) stderrFile(a int) string {
	return filepath.Join(r.dir, fmt.Sprintf("%s-%s-%d-agent%d.err", r.fault.name, strings.ReplaceAll(r.launcher, " ", ""), r.n, a))
}

// tailOf is the last n lines of a file, on one line.
func tailOf(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}
