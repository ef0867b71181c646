package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// TestNoTokenLine: multi-node c10d launches with no token anywhere, as
// torchrun runs them (PyTorch's test_launch_elastic with --nnodes=1:2 on
// localhost; accelerate's and the elastic quickstart's two agents on one
// store), share the job's token through the user's home folder, and leave
// no token file behind.
func TestNoTokenLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		agents int
		args   func(ep string, i int) []string
	}{
		{"one agent of --nnodes=1:2 (test_launch_elastic)", 1, func(ep string, _ int) []string {
			return []string{"--nnodes=1:2", "--rdzv-backend=c10d", "--rdzv-endpoint=" + ep, "--rdzv-id=elastic", "--rdzv-conf=last_call_timeout=0.3"}
		}},
		{"two agents on one host, no --local-addr", 2, func(ep string, _ int) []string {
			return []string{"--nnodes=2", "--rdzv_backend", "c10d", "--rdzv_endpoint", ep, "--rdzv_id", "2299"}
		}},
		{"two nodes of their own address", 2, func(ep string, i int) []string {
			return []string{"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=" + ep, "--rdzv-id=job42", fmt.Sprintf("--local-addr=127.0.0.%d", i+1)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			home, dir := t.TempDir(), t.TempDir()
			env := append(proctest.GorunEnv(), "HOME="+home)
			ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
			script := startWorker(t, "")
			var nodes []*node
			for i := range tt.agents {
				args := append(tt.args(ep, i), "--nproc-per-node=1", "--no-python", script, dir)
				cmd, out, errb := startGorun(t, env, args...)
				nodes = append(nodes, &node{cmd, out, errb})
			}
			for i, n := range nodes {
				if code := waitExit(t, n.cmd); code != 0 {
					t.Fatalf("agent %d exit %d\n%s", i, code, n.stderr)
				}
			}
			if got := len(starts(dir)); got != tt.agents {
				t.Errorf("%d workers started, want %d: %v", got, tt.agents, starts(dir))
			}
			log := nodes[0].stderr.String()
			if tt.agents > 1 {
				log += nodes[1].stderr.String()
			}
			if !strings.Contains(log, "no job token given: made one for this job in "+filepath.Join(home, ".gorun", "tokens")) {
				t.Errorf("no agent says where it shared the token:\n%s", log)
			}
			if left, _ := filepath.Glob(filepath.Join(home, ".gorun", "tokens", "*")); len(left) != 0 {
				t.Errorf("token files left after the job: %v", left)
			}
		})
	}
}

// TestNoTokenInKubernetes: pods share no home folder; a multi-node c10d
// launch there without a token is refused at once, naming the Secret.
func TestNoTokenInKubernetes(t *testing.T) {
	t.Parallel()
	env := append(proctest.GorunEnv(), "HOME="+t.TempDir(), "KUBERNETES_SERVICE_HOST=10.0.0.1")
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	r := runGorun(t, env, "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint="+ep, "--node-rank=0", "--no-python", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "GORUN_RDZV_TOKEN from a Secret") {
		t.Errorf("exit %d; want 2 and the Secret named:\n%s", r.code, r.stderr)
	}
}

// TestStopJobOfSharedToken: `gorun stop` finds the token of a job started
// with none in the home folder the job shares it through, and stops the
// job cleanly (75 on every node).
func TestStopJobOfSharedToken(t *testing.T) {
	t.Parallel()
	home, dir := t.TempDir(), t.TempDir()
	env := append(proctest.GorunEnv(), "HOME="+home)
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	script := writeScript(t, `trap : TERM
touch "$1/running.$RANK"
while [ ! -e "$GORUN_STOP_FILE" ]; do sleep 0.02; done
`)
	var nodes []*node
	for i := range 2 {
		cmd, out, errb := startGorun(t, env, elasticArgs(ep, "shared", i, "--nnodes=2", "--no-python", script, dir)...)
		nodes = append(nodes, &node{cmd, out, errb})
	}
	logNodesOnFailure(t, nodes)
	waitFor(t, "both workers", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "running.*"))
		return len(m) == 2
	})
	if r := runGorun(t, env, "stop", "--rdzv-endpoint="+ep, "shared"); r.code != 0 || !strings.Contains(r.stdout, "stop requested") {
		t.Fatalf("gorun stop exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	preemptWaitAll(t, "stopped job", nodes, preemptExit)
}
