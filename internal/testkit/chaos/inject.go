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
func (rn *runner) inject(ctx context.Context, f plannedFault, rng *rand.Rand, agents []*agent, lost map[int]bool, ev *events, dir string) (faultResult, error) {
	over := func() bool {
		for _, a := range agents {
			select {
			case <-a.done:
			default:
				return false
			}
		}
		return true
	}
	// Training: a step after the latest worker start, which is a while
	// ago.
	trains := func() bool {
		lines := ev.snapshot()
		s := lastMatch(lines, startLine)
		return !s.IsZero() && time.Since(s) > settled && !firstAfter(lines, s, stepLine).IsZero()
	}
	if !poll(trainWithin, func() bool { return over() || trains() }) {
		return faultResult{}, fmt.Errorf("the job did not train within %v before a %s", trainWithin, f.kind)
	}
	if over() || ctxtime.Sleep(ctx, f.after) != nil || over() {
		return faultResult{}, errJobOver
	}
	var alive []int
	targets := func() bool {
		alive = alive[:0]
		for i := range agents {
			if lost[i] {
				continue
			}
			if _, err := workerPid(dir, i, agents[i]); f.kind == WorkerKill && err != nil {
				continue // between attempts, or waiting to join: no worker
			}
			alive = append(alive, i)
		}
		return len(alive) > 0
	}
	if !poll(trainWithin, func() bool { return over() || targets() }) {
		return faultResult{}, fmt.Errorf("no node to inject a %s into within %v", f.kind, trainWithin)
	}
	if over() {
		return faultResult{}, errJobOver
	}
	node := alive[rng.IntN(len(alive))]
	fr := faultResult{kind: f.kind, node: node, at: time.Now()}
	healed := fr.at
	a := agents[node]
	switch f.kind {
	case WorkerKill:
		pid, err := workerPid(dir, node, a)
		if err != nil {
			return fr, err
		}
		fr.target = "worker pid " + strconv.Itoa(pid)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fr, fmt.Errorf("kill worker %d: %w", pid, err)
		}
	case AgentKill:
		fr.target = "agent pid " + strconv.Itoa(a.cmd.Process.Pid)
		if err := a.cmd.Process.Kill(); errors.Is(err, os.ErrProcessDone) {
			return fr, errJobOver
		} else if err != nil {
			return fr, fmt.Errorf("kill agent: %w", err)
		}
		a.killed, lost[node] = true, true
	case AgentStop:
		pid := a.cmd.Process.Pid
		fr.target = "agent pid " + strconv.Itoa(pid)
		if err := syscall.Kill(pid, syscall.SIGSTOP); errors.Is(err, syscall.ESRCH) {
			return fr, errJobOver
		} else if err != nil {
			return fr, fmt.Errorf("stop agent: %w", err)
		}
		_ = ctxtime.Sleep(ctx, holdFor) // the fault itself: stopped longer than the lease
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			return fr, fmt.Errorf("continue agent: %w", err)
		}
		healed = time.Now()
	case NetCut:
		fr.target = "host " + rn.hosts.Addr(node)
		rn.hosts.Cut(rn.tb, node)
		_ = ctxtime.Sleep(ctx, holdFor) // the fault itself: cut for longer than the lease
		rn.hosts.Heal(rn.tb, node)
		healed = time.Now()
	case MemberKill:
		// A member killed before may be on its way back: its new pid
		// comes once it serves again.
		pid := 0
		live := func() bool {
			pid = memberPid(ev.snapshot(), node)
			return pid != 0 && isMarked(pid, a.mark)
		}
		gone := func() bool {
			select {
			case <-a.done:
				return true // this node's agent ended, and its member with it
			default:
				return over()
			}
		}
		if !poll(10*time.Second, func() bool { return gone() || live() }) {
			return fr, fmt.Errorf("node %d's store member: no live pid in its log (%d)", node, pid)
		}
		if gone() || !live() {
			return fr, errJobOver
		}
		fr.target = "member pid " + strconv.Itoa(pid)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fr, fmt.Errorf("kill member %d: %w", pid, err)
		}
	}
	// Training again: once an agent stops its workers, the first step of
	// the first workers started after the fault; if none stops them
	// within detectWithin of the fault's end, the first step after it
	// (the job went on).
	poll(recoverWithin, func() bool {
		lines := ev.snapshot()
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
		return over()
	})
	return fr, nil
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
