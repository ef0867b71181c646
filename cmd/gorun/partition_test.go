package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/timing"

	"github.com/gorun-dev/gorun/internal/testkit/nettest"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// A node cut off from the store (its packets dropped, nothing refused)
// stops its workers once its lease ends, the others go on without it,
// and when the network heals it joins again and the job grows back.
func TestElasticPartitionedNodeStopsThenRejoins(t *testing.T) {
	t.Parallel()
	ttl := timing.Seconds(timing.LeaseTTL(t)) // --rdzv-conf=lease_ttl
	dir := t.TempDir()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	proxy := nettest.NewProxy(t, ep)
	script := startWorker(t, `exec sleep 60`)
	nodes := startNodes(t, 3, func(i int) []string {
		endpoint := ep
		if i == 2 {
			endpoint = proxy.Addr()
		}
		return append(elasticArgs(endpoint, "partition", i, "--nnodes=2:3", "--rdzv-conf=lease_ttl="+ttl+",last_call_timeout=0.3",
			"--stop-timeout=2s", "--no-python", script), dir)
	})
	waitStarts(t, dir, "0.3.0", "1.3.0", "2.3.0")
	cutWorkers, _ := filepath.Glob(filepath.Join(dir, "2.3.0.*"))
	if len(cutWorkers) != 1 {
		t.Fatalf("workers of rank 2: %v", cutWorkers)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Ext(cutWorkers[0]), "."))
	if err != nil {
		t.Fatal(err)
	}

	before := starts(dir)
	proxy.Cut()
	waitNewStarts(t, dir, before, "0.2.0", "1.2.0")
	// No split brain: the cut node's worker is stopped too.
	proctest.WaitGone(t, "the cut node's worker", 30*time.Second, []int{pid})

	before = starts(dir)
	proxy.Heal()
	waitNewStarts(t, dir, before, "0.3.0", "1.3.0", "2.3.0")
	for _, n := range nodes {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 143 {
			t.Errorf("node %d exit %d; want 143\n%s", i, code, n.stderr)
		}
	}
	if !strings.Contains(nodes[2].stderr.String(), "lease ended") {
		t.Errorf("the cut node did not report its lost lease:\n%s", nodes[2].stderr)
	}
}
