package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestRefusedNodeEndsAFixedJobAtOnce: in a job of a fixed node count that
// has not formed, a node refused for a different shape (here its
// --max-restarts; a different worker count is no longer a refusal) tells
// the others through the job's outcome: every node stops at once with the
// reason, instead of the healthy one waiting for the join timeout (10
// minutes).
func TestRefusedNodeEndsAFixedJobAtOnce(t *testing.T) {
	t.Parallel()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	common := []string{"--rdzv-backend=c10d", "--rdzv-endpoint=" + ep, "--rdzv-id=uneven", "--nnodes=2",
		"--rdzv-conf=join_timeout=120", "--no-python", "/bin/true"}
	first, _, firstErr := startGorun(t, testEnv(), append([]string{"--max-restarts=1", "--local-addr=127.0.0.1"}, common...)...)
	waitFor(t, "the first node to host the store", func() bool { return strings.Contains(firstErr.String(), "hosting the job's embedded etcd") })
	second := runGorun(t, testEnv(), append([]string{"--max-restarts=3", "--local-addr=127.0.0.2"}, common...)...)
	if second.code != 2 || !strings.Contains(second.stderr, "--max-restarts: this node has 3, the job has 1") {
		t.Fatalf("refused node: exit %d; want 2 with the difference\n%s", second.code, second.stderr)
	}
	if code := waitExit(t, first); code == 0 || !strings.Contains(firstErr.String(), "node 127.0.0.2 cannot join the job") {
		t.Fatalf("healthy node: exit %d; want a failure naming the refused node\n%s", code, firstErr)
	}
}
