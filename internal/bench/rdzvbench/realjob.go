package rdzvbench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/bench"
	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/launcher/goodput"
)

// JobResult is one run of `gorun bench agents`: a real elastic job of
// gorun agents (processes, each with one worker, /bin/sleep), its store
// hosted by the first agent as a job on the c10d backend has it, beside
// the in-process benchmark of the same count in the same run.
type JobResult struct {
	Nodes int `json:"nodes"`
	// StartSeconds is the time from the first agent's start to the last
	// one's (starting n processes, one after another).
	StartSeconds float64 `json:"start_seconds"`
	// FormSeconds is the time from the last agent's join (its first
	// rendezvous event) to the last agent's workers of round 0 starting:
	// the rendezvous once every node is there. FormFirstSeconds is the
	// same to the first agent's workers: the round had closed by then,
	// and what follows is the agents starting their workers, here all on
	// one machine's cores.
	FormSeconds      float64 `json:"form_seconds"`
	FormFirstSeconds float64 `json:"form_first_seconds"`
	// LossSeconds is the time from one agent's kill (SIGKILL, with its
	// worker) to the last survivor's workers of the round without it;
	// LossFirstSeconds to the first survivor's.
	LossSeconds      float64 `json:"loss_seconds"`
	LossFirstSeconds float64 `json:"loss_first_seconds"`
	// JoinSeconds is the time from a new agent's start to the last
	// agent's workers of the round with it; JoinFirstSeconds to the
	// first agent's.
	JoinSeconds      float64 `json:"join_seconds"`
	JoinFirstSeconds float64 `json:"join_first_seconds"`
	// AgentBytes is an agent process's mean resident memory.
	AgentBytes int64 `json:"agent_bytes"`
	// Twin is `gorun bench rendezvous` for the same count, run after the
	// job in the same run.
	Twin Result `json:"in_process"`
}

// jobLimit bounds each step of the job.
const jobLimit = 3 * time.Minute

// RunJob runs a job of n gorun agents (binary gorun) in dir, measures
// its first round, a node's loss and a node's join, then the in-process
// twin.
func RunJob(ctx context.Context, gorun string, n int, dir string) (JobResult, error) {
	if n < 2 {
		return JobResult{}, fmt.Errorf("--agents %d: want at least 2 for a real job (one is lost, and one joins)", n)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return JobResult{}, err
	}
	endpoint := ln.Addr().String()
	ln.Close()
	job := &realJob{gorun: gorun, dir: dir, endpoint: endpoint, nodes: n}
	defer job.stop()
	res := JobResult{Nodes: n}

	// Round 0: agent 0 hosts the store; the others join it once it
	// listens, as a job's nodes whose first node came up first.
	if err := job.start(0); err != nil {
		return res, err
	}
	if err := bench.WaitListening(ctx, endpoint, jobLimit); err != nil {
		return res, fmt.Errorf("agent 0 never opened the store at %s: %w", endpoint, err)
	}
	for a := 1; a < n; a++ {
		if err := job.start(a); err != nil {
			return res, err
		}
	}
	all := make([]int, n)
	for a := range all {
		all[a] = a
	}
	first, err := job.waitSpawn(ctx, all, 0, n)
	if err != nil {
		return res, fmt.Errorf("round 0: %w", err)
	}
	res.StartSeconds = first.lastStart.Sub(first.firstStart).Seconds()
	res.FormSeconds = first.lastSpawn.Sub(first.lastJoin).Seconds()
	res.FormFirstSeconds = first.firstSpawn.Sub(first.lastJoin).Seconds()
	res.AgentBytes = job.meanResident()

	// A node's loss: the last agent (not the store's host), with its worker.
	victim := n - 1
	lost := time.Now()
	job.kill(victim)
	survivors := all[:victim]
	after, err := job.waitSpawn(ctx, survivors, 1, n-1)
	if err != nil {
		return res, fmt.Errorf("after the loss of agent %d: %w", victim, err)
	}
	res.LossSeconds = after.lastSpawn.Sub(lost).Seconds()
	res.LossFirstSeconds = after.firstSpawn.Sub(lost).Seconds()

	// A node's join: a new agent; the round after it has n nodes again.
	joined := time.Now()
	if err := job.start(n); err != nil {
		return res, err
	}
	back, err := job.waitSpawn(ctx, append(survivors, n), after.round+1, n)
	if err != nil {
		return res, fmt.Errorf("after agent %d joined: %w", n, err)
	}
	res.JoinSeconds = back.lastSpawn.Sub(joined).Seconds()
	res.JoinFirstSeconds = back.firstSpawn.Sub(joined).Seconds()
	job.stop()

	if res.Twin, err = Run(ctx, n, 0); err != nil {
		return res, fmt.Errorf("in-process: %w", err)
	}
	return res, nil
}

// realJob is the job's agents.
type realJob struct {
	gorun, dir, endpoint string
	nodes                int
	cmds                 map[int]*exec.Cmd
}

// start starts agent a, in a process group of its own (with its worker).
func (j *realJob) start(a int) error {
	if j.cmds == nil {
		j.cmds = map[int]*exec.Cmd{}
	}
	out, err := os.Create(filepath.Join(j.dir, "agent"+strconv.Itoa(a)+".log"))
	if err != nil {
		return err
	}
	defer out.Close() // the child has its own copy
	cmd := exec.Command(j.gorun, "--log-dir="+j.logDir(a), "--nnodes="+strconv.Itoa(j.nodes/2)+":"+strconv.Itoa(j.nodes), "--nproc-per-node=1",
		"--rdzv-backend=c10d", "--rdzv-endpoint="+j.endpoint, "--rdzv-id=bench-agents", "--no-python", "/bin/sleep", "3600")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start agent %d: %w", a, err)
	}
	j.cmds[a] = cmd
	return nil
}

func (j *realJob) logDir(a int) string { return filepath.Join(j.dir, "agent"+strconv.Itoa(a)) }

// kill ends agent a and its worker at once.
func (j *realJob) kill(a int) {
	if c := j.cmds[a]; c != nil {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		_ = c.Wait()
		delete(j.cmds, a)
	}
}

// stop ends every agent: SIGTERM (the agent stops its worker and leaves),
// then SIGKILL for any left after 30 s.
func (j *realJob) stop() {
	for _, c := range j.cmds {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	}
	for a, c := range j.cmds {
		t := time.AfterFunc(30*time.Second, func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL) })
		_ = c.Wait()
		t.Stop()
		delete(j.cmds, a)
	}
}

// meanResident is the agents' mean resident memory.
func (j *realJob) meanResident() int64 {
	var sum, count int64
	for _, c := range j.cmds {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.Process.Pid)); err == nil {
			if kb, ok := vmRSS(string(b)); ok {
				sum, count = sum+kb<<10, count+1
			}
		}
	}
	if count == 0 {
		return 0
	}
	return sum / count
}

// spawned is what the agents' event logs say of a round.
type spawned struct {
	round                                                  int
	firstStart, lastStart, lastJoin, firstSpawn, lastSpawn time.Time
}

// waitSpawn waits until each of agents has started workers in a world of
// size in a round from round on, reading their event logs, and returns
// when the last of them did. A round of another size that starts
// meanwhile is passed over.
func (j *realJob) waitSpawn(ctx context.Context, agents []int, round, size int) (spawned, error) {
	var s spawned
	var missing int
	var rerr error
	// Every 100 ms: each look reads every agent's event log.
	err := ctxtime.Poll(ctx, 100*time.Millisecond, jobLimit, func() bool {
		s, missing, rerr = j.readSpawns(agents, round, size)
		return rerr != nil || missing < 0
	})
	switch {
	case rerr != nil:
		return s, rerr
	case err != nil && ctx.Err() != nil:
		return s, err
	case err != nil:
		return s, fmt.Errorf("%d of %d agents did not start workers in a world of %d within %v (their logs: %s)", missing, len(agents), size, jobLimit, j.dir)
	}
	return s, nil
}

// readSpawns reads the agents' event logs once: missing is how many have
// not spawned yet (-1 when none is missing).
func (j *realJob) readSpawns(agents []int, round, size int) (spawned, int, error) {
	var s spawned
	missing := 0
	for _, a := range agents {
		events, err := agentEvents(j.logDir(a))
		if err != nil {
			return s, 0, fmt.Errorf("agent %d: %w", a, err)
		}
		var spawn, join time.Time
		for _, e := range events {
			switch {
			case e.Kind == goodput.EventStart:
				if s.firstStart.IsZero() || e.Time.Before(s.firstStart) {
					s.firstStart = e.Time
				}
				if e.Time.After(s.lastStart) {
					s.lastStart = e.Time
				}
			case e.Kind == goodput.EventRendezvous && join.IsZero():
				join = e.Time
			case e.Kind == goodput.EventSpawn && e.Round >= round && e.WorldSize == size && spawn.IsZero():
				spawn = e.Time
				s.round = max(s.round, e.Round)
			}
		}
		if spawn.IsZero() {
			missing++
			continue
		}
		if join.After(s.lastJoin) {
			s.lastJoin = join
		}
		if spawn.After(s.lastSpawn) {
			s.lastSpawn = spawn
		}
		if s.firstSpawn.IsZero() || spawn.Before(s.firstSpawn) {
			s.firstSpawn = spawn
		}
	}
	if missing == 0 {
		missing = -1
	}
	return s, missing, nil
}

// agentEvents reads the events of the agent whose --log-dir is dir; none
// before the agent wrote its first.
func agentEvents(dir string) ([]goodput.Event, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "*", goodput.EventsFile))
	if len(files) == 0 {
		return nil, nil
	}
	f, err := os.Open(files[0])
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return goodput.ReadEvents(f)
}
