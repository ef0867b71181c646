package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
)

// errJobOver: the job ended before the fault could be injected.
var errJobOver = errors.New("the job ended first")

// trainWithin bounds the wait for the job to train (again) before a
// fault, and recoverWithin the wait for training again after one.
const (
	trainWithin   = 90 * time.Second
	recoverWithin = 90 * time.Second
	// settled: no worker has started for this long (a round's starts come
	// together).
	settled = time.Second
)

// inject waits until the job trains, then for f.after, and injects f
// into one of the nodes not lost; it then waits for training again.
func (rn *runner) inject(ctx context.Context, f scheduledFault, rng *rand.Rand, agents []*agent, lost map[int]bool, ev *events, dir string) (faultResult, error) {
	sc := &scene{agents: agents, lost: lost, ev: ev, dir: dir}
	node, err := sc.pickTarget(ctx, f, rng)
	if err != nil {
		return faultResult{}, err
	}
	fr := faultResult{kind: f.kind, node: node, at: time.Now()}
	healed, err := rn.hit(ctx, sc, &fr)
	if err != nil {
		return fr, err
	}
	sc.awaitRecovery(&fr, healed)
	return fr, nil
}

// scene is one job as a fault finds it: its agents, the nodes already
// lost, the agents' events and the folder of the workers' pid files.
type scene struct {
	agents []*agent
	lost   map[int]bool
	ev     *events
	dir    string
}

// over says whether every agent has ended.
func (sc *scene) over() bool {
	for _, a := range sc.agents {
		select {
		case <-a.done:
		default:
			return false
		}
	}
	return true
}

// trains says whether the job trains: a step after the latest worker
// start, which is a while ago.
func (sc *scene) trains() bool {
	lines := sc.ev.snapshot()
	s := lastMatch(lines, startLine)
	return !s.IsZero() && time.Since(s) > settled && !firstAfter(lines, s, stepLine).IsZero()
}

// pickTarget waits until the job trains, then for f.after, and picks a
// node not lost (for a worker kill, one with a worker).
func (sc *scene) pickTarget(ctx context.Context, f scheduledFault, rng *rand.Rand) (int, error) {
	if !poll(trainWithin, func() bool { return sc.over() || sc.trains() }) {
		return 0, fmt.Errorf("the job did not train within %v before a %s", trainWithin, f.kind)
	}
	if sc.over() || ctxtime.Sleep(ctx, f.after) != nil || sc.over() {
		return 0, errJobOver
	}
	var alive []int
	targets := func() bool {
		alive = alive[:0]
		for i := range sc.agents {
			if sc.lost[i] {
				continue
			}
			if _, err := workerPid(sc.dir, i, sc.agents[i]); f.kind == WorkerKill && err != nil {
				continue // between attempts, or waiting to join: no worker
			}
			alive = append(alive, i)
		}
		return len(alive) > 0
	}
	if !poll(trainWithin, func() bool { return sc.over() || targets() }) {
		return 0, fmt.Errorf("no node to inject a %s into within %v", f.kind, trainWithin)
	}
	if sc.over() {
		return 0, errJobOver
	}
	return alive[rng.IntN(len(alive))], nil
}

// hit injects fr.kind into node fr.node, naming what it hit in
// fr.target, and returns when the fault ended (a stop or a cut lasts
// holdFor; the others end at once).
func (rn *runner) hit(ctx context.Context, sc *scene, fr *faultResult) (healed time.Time, _ error) {
	node, a := fr.node, sc.agents[fr.node]
	healed = fr.at
	switch fr.kind {
	case WorkerKill:
		pid, err := workerPid(sc.dir, node, a)
		if err != nil {
			return healed, err
		}
		fr.target = "worker pid " + strconv.Itoa(pid)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return healed, fmt.Errorf("kill worker %d: %w", pid, err)
		}
	case AgentKill:
		fr.target = "agent pid " + strconv.Itoa(a.cmd.Process.Pid)
		if err := a.cmd.Process.Kill(); errors.Is(err, os.ErrProcessDone) {
			return healed, errJobOver
		} else if err != nil {
			return healed, fmt.Errorf("kill agent: %w", err)
		}
		a.killed, sc.lost[node] = true, true
	case AgentStop:
		pid := a.cmd.Process.Pid
		fr.target = "agent pid " + strconv.Itoa(pid)
		if err := syscall.Kill(pid, syscall.SIGSTOP); errors.Is(err, syscall.ESRCH) {
			return healed, errJobOver
		} else if err != nil {
			return healed, fmt.Errorf("stop agent: %w", err)
		}
		_ = ctxtime.Sleep(ctx, holdFor) // the fault itself: stopped longer than the lease
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			return healed, fmt.Errorf("continue agent: %w", err)
		}
		healed = time.Now()
	case NetCut:
		fr.target = "host " + rn.hosts.Addr(node)
		rn.hosts.Cut(rn.tb, node)
		_ = ctxtime.Sleep(ctx, holdFor) // the fault itself: cut for longer than the lease
		rn.hosts.Heal(rn.tb, node)
		healed = time.Now()
	case MemberKill:
		return healed, sc.killMember(fr)
	}
	return healed, nil
}

// killMember kills node fr.node's store member. A member killed before
// may be on its way back: its new pid comes once it serves again.
func (sc *scene) killMember(fr *faultResult) error {
	node, a := fr.node, sc.agents[fr.node]
	pid := 0
	live := func() bool {
		pid = memberPid(sc.ev.snapshot(), node)
		return pid != 0 && isMarked(pid, a.mark)
	}
	gone := func() bool {
		select {
		case <-a.done:
			return true // this node's agent ended, and its member with it
		default:
			return sc.over()
		}
	}
	if !poll(10*time.Second, func() bool { return gone() || live() }) {
		return fmt.Errorf("node %d's store member: no live pid in its log (%d)", node, pid)
	}
	if gone() || !live() {
		return errJobOver
	}
	fr.target = "member pid " + strconv.Itoa(pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill member %d: %w", pid, err)
	}
	return nil
}

// awaitRecovery waits for training again: once an agent stops its
// workers, the first step of the first workers started after the fault;
// if none stops them within detectWithin of the fault's end (healed),
// the first step after it (the job went on).
func (sc *scene) awaitRecovery(fr *faultResult, healed time.Time) {
	poll(recoverWithin, func() bool {
		lines := sc.ev.snapshot()
		s := firstAfter(lines, fr.at, startLine)
		if !s.IsZero() || !firstStderrAfter(lines, fr.at, stopLine).IsZero() {
			fr.interrupted = true
			if t := firstAfter(lines, s, stepLine); !s.IsZero() && !t.IsZero() {
				fr.recovered, fr.ok = t.Sub(fr.at), true
				return true
			}
		} else if time.Since(healed) > detectWithin {
			if t := firstAfter(lines, fr.at, stepLine); !t.IsZero() {
				fr.recovered, fr.ok = t.Sub(fr.at), true
				return true
			}
		}
		return sc.over()
	})
}

// workerPid is the pid of local rank 0 on node, which its wrapper wrote;
// it must be a live process of the round.
func workerPid(dir string, node int, a *agent) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "worker."+strconv.Itoa(node)+".0"))
	if err != nil {
		return 0, fmt.Errorf("node %d's worker: %w", node, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !isMarked(pid, a.mark) {
		return 0, fmt.Errorf("node %d's worker: %q is no live worker of the round", node, b)
	}
	return pid, nil
}
