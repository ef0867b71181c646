package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/nettest"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// TestStoreOutlivesItsHostAcrossHosts: three agents on three hosts
// (network namespaces) train an unchanged PyTorch script with checkpoints
// and resume (tests/hangs/train_faults.py) on a plain c10d line, with no
// store setting. The store grows to three members by itself; SIGKILL of
// the agent hosting its first member, the endpoint's, leaves the other two
// hosts a store: they re-form as two, resume from the checkpoint, finish,
// and exit 0, with no restart counted (--max-restarts=0).
func TestStoreOutlivesItsHostAcrossHosts(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	hosts := nettest.NewHosts(t, 3)
	ckpt := filepath.Join(t.TempDir(), "ckpt.pt")
	const port = 29410 // each host has its own addresses: nothing else binds there
	ep := fmt.Sprintf("%s:%d", hosts.Addr(0), port)
	var nodes []*node
	for i := range 3 {
		args := []string{gorunBin, "--rdzv-backend=c10d", "--rdzv-endpoint=" + ep, "--rdzv-id=growns", "--local-addr=" + hosts.Addr(i),
			"--nnodes=2:3", "--nproc-per-node=1", "--max-restarts=0", "--rdzv-conf=last_call_timeout=1",
			"--python", py, faultScript, "--steps=200", "--checkpoint=" + ckpt}
		// gloo's default device is the host name's address, which a
		// namespace does not have: its own interface, as on a cluster.
		nodes = append(nodes, startOnHost(t, hosts, i, testEnv("GLOO_SOCKET_IFNAME=eth0"), args...))
	}
	logNodesOnFailure(t, nodes)
	output := func() string {
		var all string
		for _, n := range nodes {
			all += n.stdout.String()
		}
		return all
	}
	host := nodes[0] // the endpoint's
	proctest.WaitFor(t, "the store grown and a checkpoint past step 30", 3*time.Minute, func() bool {
		return strings.Contains(host.stderr.String(), "the job's store has 3 voting members") && strings.Contains(output(), "step 30 ")
	})
	if _, err := os.Stat(ckpt); err != nil {
		t.Fatalf("no checkpoint at step 30: %v", err)
	}
	_ = host.cmd.Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	waitExit(t, host.cmd)
	for i, n := range nodes[1:] {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Errorf("node %d: exit %d; want 0 (the store outlives its first host)", i+1, code)
		}
	}
	t.Logf("the survivors finished %v after the kill", time.Since(killed))
	out := output()
	if n := strings.Count(out, "step 0 "); n != 1 {
		t.Errorf("step 0 printed %d times; want once (the second round resumes from the checkpoint):\n%s", n, out)
	}
	if !strings.Contains(out, "step 190 ") {
		t.Errorf("the training did not reach step 190:\n%s", out)
	}
	var logs string
	for _, n := range nodes[1:] {
		logs += n.stderr.String()
	}
	if !strings.Contains(logs, "at "+hosts.Addr(0)+" was lost") {
		t.Errorf("the survivors do not name the lost host %s", hosts.Addr(0))
	}
	if strings.Contains(logs, "the job's store is gone") || strings.Contains(logs, "no restarts left") {
		t.Errorf("a survivor lost the store, or counted the lost host as a failure")
	}
}
