package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// lostNodeScript trains three ranks for 20 s, or two for 1 s, and says
// which (on rank 0) when done.
const lostNodeScript = `import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
world = dist.get_world_size()
open(os.path.join(sys.argv[1], "world%d.rank%d" % (world, dist.get_rank())), "w").close()
steps = 400 if world == 3 else 20
for step in range(steps):
    t = torch.ones(1)
    dist.all_reduce(t)
    time.sleep(0.05)
if dist.get_rank() == 0:
    print("done world %d restart %s" % (world, os.environ["TORCHELASTIC_RESTART_COUNT"]), flush=True)
dist.destroy_process_group()
`

// TestLostNodeIsNoFailure: three agents train an unchanged PyTorch script
// (gloo) with --max-restarts=0; SIGKILL of an agent that does not host
// the store makes the survivors' ranks lose their peer ("Connection
// closed by peer"), yet the survivors name the lost node, count no
// restart, train again in a round of two and finish: a lost node is a
// membership change, not a failure of the job.
func TestLostNodeIsNoFailure(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	marks := t.TempDir()
	script := writePython(t, marks, lostNodeScript)
	nodes := startNodes(t, 3, func(i int) []string {
		return elasticArgs(ep, "lostnode", i, "--nnodes=2:3", "--nproc-per-node=1", "--max-restarts=0",
			"--rdzv-conf=last_call_timeout=0.5", "--python", py, script, marks)
	})
	proctest.WaitFor(t, "three ranks training", 120*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(marks, "world3.rank*"))
		return len(m) == 3
	})
	victim := nodes[2]
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	waitExit(t, victim.cmd)
	// The survivors' ranks fail first (their peer gone), or the round's
	// end comes first: either way no restart (Agent.lostNode's unit test
	// holds the first order).
	survivorsFinishAsTwo(t, nodes[:2])
}

// survivorsFinishAsTwo checks that the survivors of a lost node (running
// lostNodeScript) name it lost, finish as two with exit 0 and count no
// restart, and that none says what is not: the store gone, or absent
// words. It returns their output.
func survivorsFinishAsTwo(t *testing.T, survivors []*node, absent ...string) string {
	t.Helper()
	var logs string
	for i, n := range survivors {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Errorf("survivor %d: exit %d; want 0 (a lost node is no failure)", i, code)
		}
		logs += n.stdout.String() + n.stderr.String()
	}
	for _, w := range []string{"was lost: its lease ended", "done world 2 restart 0"} {
		if !strings.Contains(logs, w) {
			t.Errorf("the survivors do not say %q", w)
		}
	}
	for _, w := range append([]string{"no restarts left"}, absent...) {
		if strings.Contains(logs, w) {
			t.Errorf("a survivor says %q", w)
		}
	}
	if t.Failed() {
		t.Logf("survivors:\n%s", logs)
	}
	return logs
}

// TestStoreHostLostIsNamed: the embedded store of a plain c10d line has
// one member, on the endpoint's agent; SIGKILL of that agent ends the
// survivor's job at once (not after connect_timeout's 60 s), naming the
// store's host and the way to a store that outlives it.
func TestStoreHostLostIsNamed(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	marks := t.TempDir()
	body := `import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
open(os.path.join(sys.argv[1], "rank%d" % dist.get_rank()), "w").close()
for step in range(100000):
    t = torch.ones(1)
    dist.all_reduce(t)
    time.sleep(0.05)
`
	script := writePython(t, marks, body)
	nodes := startNodes(t, 2, func(i int) []string {
		return elasticArgs(ep, "storehost", i, "--nnodes=2", "--nproc-per-node=1", "--python", py, script, marks)
	})
	proctest.WaitFor(t, "both ranks training", 120*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(marks, "rank*"))
		return len(m) == 2
	})
	host := nodes[0] // --local-addr=127.0.0.1: the endpoint's host
	_ = host.cmd.Process.Signal(syscall.SIGKILL)
	waitExit(t, host.cmd)
	survivor := nodes[1]
	if code := waitExit(t, survivor.cmd); code != 1 {
		t.Errorf("survivor: exit %d; want 1", code)
	}
	s := survivor.stderr.String()
	for _, w := range []string{"the job's store is gone: its only member, at " + ep + ", hosted by the agent on that host", "grows its store to three members"} {
		if !strings.Contains(s, w) {
			t.Errorf("survivor does not say %q:\n%s", w, s)
		}
	}
	if strings.Contains(s, "flight recorder: could not gather") || strings.Contains(s, "did not answer within") {
		t.Errorf("survivor says what does not concern it:\n%s", s)
	}
}

// TestStoreOutlivesItsHost: on a plain c10d line of three nodes, the
// embedded store grows to three members by itself; SIGKILL of the agent
// hosting its first member (the endpoint's) leaves the other two nodes a
// store, and they finish the job as two, with no restart counted.
func TestStoreOutlivesItsHost(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	marks := t.TempDir()
	script := writePython(t, marks, lostNodeScript)
	nodes := startNodes(t, 3, func(i int) []string {
		return elasticArgs(ep, "storehost3", i, "--nnodes=2:3", "--nproc-per-node=1", "--max-restarts=0",
			"--rdzv-conf=last_call_timeout=0.5", "--python", py, script, marks)
	})
	host := nodes[0] // --local-addr=127.0.0.1: the endpoint's host
	proctest.WaitFor(t, "three ranks training and the store grown", 120*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(marks, "world3.rank*"))
		return len(m) == 3 && strings.Contains(host.stderr.String(), "the job's store has 3 voting members")
	})
	_ = host.cmd.Process.Signal(syscall.SIGKILL)
	waitExit(t, host.cmd)
	// The store outlives its first host.
	survivorsFinishAsTwo(t, nodes[1:], "the job's store is gone")
	if t.Failed() {
		t.Logf("store host:\n%s", host.stderr.String())
	}
}
