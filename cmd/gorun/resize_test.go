package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/timing"
)

// tp2pp2 is a plan valid at 4 and 8 workers (2 and 4 nodes of 2), not at
// 2 (smaller than one replica) or 6 (not a multiple of TP x PP); with a
// global batch of 32 in micro-batches of 2, 4 workers run DP 1 with 16
// micro-batches per step and 8 workers DP 2 with 8.
const tp2pp2 = "tensor_model_parallel_size: 2\npipeline_model_parallel_size: 2\nglobal_batch_size: 32\nmicro_batch_size: 2\nnum_layers: 8\n"

// resizeWorker records each start as up.<world>.<rank>.<node>.<dp>.<micro-batches>.<pid>
// and runs until $1/finish exists.
const resizeWorker = `touch "$1/up.$WORLD_SIZE.$RANK.$2.$GORUN_DP.$GORUN_NUM_MICROBATCHES.$$"
while [ ! -e "$1/finish" ]; do sleep 0.05; done
`

// upReport is one worker start, as the worker wrote it.
type upReport struct{ world, rank, node, dp, micro int }

// ups lists the recorded starts.
func ups(dir string) []upReport {
	files, _ := filepath.Glob(filepath.Join(dir, "up.*"))
	var out []upReport
	for _, f := range files {
		p := strings.Split(filepath.Base(f), ".")
		if len(p) != 7 {
			continue
		}
		var n [5]int
		for i := range n {
			n[i], _ = strconv.Atoi(p[i+1])
		}
		out = append(out, upReport{n[0], n[1], n[2], n[3], n[4]})
	}
	return out
}

// countWorld counts the starts at world size w.
func countWorld(dir string, w int) int {
	n := 0
	for _, u := range ups(dir) {
		if u.world == w {
			n++
		}
	}
	return n
}

func writePlan(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plan.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestElasticPlanResizes: a TP2 PP2 plan (global batch 32, micro batch
// 2) under --nnodes=1:4 with 2 workers per node. One node alone never
// starts (2 workers are not a replica), two run at DP 1 with 16
// micro-batches, a third waits as a hot spare (6 workers do not split),
// a fourth makes the round grow to 4 nodes at DP 2 with 8 micro-batches.
func TestElasticPlanResizes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plan := writePlan(t, tp2pp2)
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	script := writeScript(t, resizeWorker)
	args := func(i int) []string {
		return append(elasticArgs(ep, "resize", i, "--nnodes=1:4", "--nproc-per-node=2", "--plan", plan,
			"--rdzv-conf=last_call_timeout=1", "--no-python", script), dir, strconv.Itoa(i))
	}
	var nodes []*node
	start := func(i int) *node {
		n := startNodes(t, 1, func(int) []string { return args(i) })[0]
		nodes = append(nodes, n)
		return n
	}
	logNodesOnFailure(t, nodes)
	first := start(0)
	// Its progress line comes after the 5 s progress interval, well past
	// the 1 s last call: a size the plan allows would have started.
	waitFor(t, "node 0 waiting alone", func() bool {
		return strings.Contains(first.stderr.String(), "waiting for nodes: 1 of min 1 / max 4 joined (the layout is valid at [2 4] nodes)")
	})
	if n := len(ups(dir)); n != 0 {
		t.Fatalf("%d workers started on one node", n)
	}
	start(1)
	waitFor(t, "the 2-node round", func() bool { return countWorld(dir, 4) == 4 })
	spare := start(2)
	waitFor(t, "node 2 waiting as a spare", func() bool { return strings.Contains(spare.stderr.String(), "waits as a hot spare") })
	start(3)
	waitFor(t, "the 4-node round", func() bool { return countWorld(dir, 8) == 8 })
	if err := os.WriteFile(filepath.Join(dir, "finish"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Errorf("node %d exit %d", i, code)
		}
	}
	ranks := map[int][]int{}
	for _, u := range ups(dir) {
		want := map[int][2]int{4: {1, 16}, 8: {2, 8}}[u.world]
		if want == [2]int{} || u.dp != want[0] || u.micro != want[1] {
			t.Errorf("start %+v: a world of %d must not start, or the wrong DP / micro-batches", u, u.world)
		}
		ranks[u.world] = append(ranks[u.world], u.rank)
	}
	for w, rs := range ranks {
		slices.Sort(rs)
		for i, r := range rs {
			if r != i || len(rs) != w {
				t.Errorf("world %d: ranks %v; want 0..%d once each", w, rs, w-1)
				break
			}
		}
	}
}

// startWithSpare starts a job of the TP2 PP2 plan under --nnodes=2:3
// with 2 workers per node running worker (given dir and the node's
// index): two nodes, then, once they run, a third that waits as a spare.
func startWithSpare(t *testing.T, dir, run, worker, conf string) []*node {
	t.Helper()
	plan := writePlan(t, tp2pp2)
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	script := writeScript(t, worker)
	args := func(i int) []string {
		return append(elasticArgs(ep, run, i, "--nnodes=2:3", "--nproc-per-node=2", "--plan", plan,
			conf, "--no-python", script), dir, strconv.Itoa(i))
	}
	nodes := startNodes(t, 2, args)
	logNodesOnFailure(t, nodes)
	waitFor(t, "the 2-node round", func() bool { return countWorld(dir, 4) == 4 })
	spare := startNodes(t, 1, func(int) []string { return args(2) })
	logNodesOnFailure(t, spare)
	waitFor(t, "node 2 waiting as a spare", func() bool { return strings.Contains(spare[0].stderr.String(), "waits as a hot spare") })
	return append(nodes, spare...)
}

// TestSpareTakesALostNodesPlace: a 3-node job whose plan is valid at 2
// nodes runs with 1 spare, which starts no worker; SIGKILL of a member's
// agent brings the spare in, and the job keeps its size and layout.
func TestSpareTakesALostNodesPlace(t *testing.T) {
	t.Parallel()
	ttl := timing.Seconds(timing.LeaseTTL(t)) // --rdzv-conf=lease_ttl
	dir := t.TempDir()
	nodes := startWithSpare(t, dir, "spare", resizeWorker, "--rdzv-conf=lease_ttl="+ttl+",last_call_timeout=30")
	if err := nodes[1].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = nodes[1].cmd.Wait()
	// The spare completes the only valid size at once: no 30 s last call.
	waitFor(t, "the round with the spare", func() bool { return countWorld(dir, 4) == 8 })
	if err := os.WriteFile(filepath.Join(dir, "finish"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		if code := waitExit(t, nodes[i].cmd); code != 0 {
			t.Errorf("node %d exit %d", i, code)
		}
	}
	byNode := map[int]int{}
	for _, u := range ups(dir) {
		if u.world != 4 || u.dp != 1 || u.micro != 16 {
			t.Errorf("start %+v: want world 4, DP 1, 16 micro-batches throughout", u)
		}
		byNode[u.node]++
	}
	if byNode[0] != 4 || byNode[1] != 2 || byNode[2] != 2 {
		t.Errorf("starts by node %v; want node 0 twice (both rounds), node 1 in the first, the spare in the second", byNode)
	}
}

// TestDryRunShowsSizesAndSpares: --dry-run with a plan under
// --nnodes=MIN:MAX lists the valid sizes and what each becomes, and a
// node ranked beyond the largest valid size is a spare with no worker.
func TestDryRunShowsSizesAndSpares(t *testing.T) {
	t.Parallel()
	plan := writePlan(t, tp2pp2)
	base := []string{"--dry-run", "--plan", plan, "--nnodes=1:3", "--nproc-per-node=2", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:1", "--no-python", "/bin/true"}
	for _, tt := range []struct {
		rank  string
		want  []string
		spare bool
	}{
		{"0", []string{"1 nodes, 2 workers: not valid", "2 nodes, 4 workers: valid, DP 1, 16 micro-batches per step", "3 nodes, 6 workers: not valid", "GORUN_NUM_MICROBATCHES=16", "GORUN_DP=1"}, false},
		{"2", []string{"would wait as a hot spare"}, true},
	} {
		r := runGorun(t, testEnv(), append([]string{"--node-rank=" + tt.rank}, base...)...)
		if r.code != 0 {
			t.Fatalf("node rank %s: exit %d\n%s", tt.rank, r.code, r.stderr)
		}
		for _, w := range tt.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("node rank %s: no %q in\n%s", tt.rank, w, r.stdout)
			}
		}
		if got := strings.Contains(r.stdout, "command:"); got == tt.spare {
			t.Errorf("node rank %s: workers listed %v, want %v", tt.rank, got, !tt.spare)
		}
	}
	// No valid size at all: refused before anything starts, each size
	// saying why.
	r := runGorun(t, testEnv(), "--dry-run", "--plan", plan, "--nnodes=1:1", "--nproc-per-node=3", "--no-python", "/bin/true")
	if r.code != 2 || !strings.Contains(r.stderr, "not valid for 3 workers") {
		t.Errorf("exit %d; want 2 and the reason\n%s", r.code, r.stderr)
	}
	r = runGorun(t, testEnv(), "--dry-run", "--plan", plan, "--nnodes=1:3", "--nproc-per-node=1", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:1", "--no-python", "/bin/true")
	if r.code != 2 || !strings.Contains(r.stderr, "valid at no size from 1 to 3 nodes") || !strings.Contains(r.stderr, "3 nodes (3 workers)") {
		t.Errorf("exit %d; want 2 and every size's reason\n%s", r.code, r.stderr)
	}
}

// TestPlanWorldSizes: gorun plan --world-sizes shows which sizes are
// valid and what each becomes; it exits 1 when none is, 2 for a bad list.
func TestPlanWorldSizes(t *testing.T) {
	t.Parallel()
	plan := writePlan(t, tp2pp2)
	for _, tt := range []struct {
		sizes string
		code  int
		want  []string
	}{
		{"4,6,8-16:8", 0, []string{"4          -      yes    1      16 x 2", "6          -      no", "not a multiple of tp x pp x cp", "16         2      yes    4      4 x 2"}},
		{"2,6", 1, []string{"2          -      no"}},
		{"0", 2, []string{"--world-sizes"}},
	} {
		r := runGorun(t, testEnv(), "plan", "--config", plan, "--world-sizes", tt.sizes)
		if r.code != tt.code {
			t.Errorf("%s: exit %d, want %d\n%s%s", tt.sizes, r.code, tt.code, r.stdout, r.stderr)
		}
		for _, w := range tt.want {
			if !strings.Contains(r.stdout+r.stderr, w) {
				t.Errorf("%s: no %q in\n%s%s", tt.sizes, w, r.stdout, r.stderr)
			}
		}
	}
}

// TestPreemptionEndsTheSpare: a stop request (SIGTERM to a member's
// agent) stops the job cleanly everywhere: the members' workers exit 0,
// and every agent, the waiting spare included, exits 75.
func TestPreemptionEndsTheSpare(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	nodes := startWithSpare(t, dir, "spare-stop", `trap '[ -e "$GORUN_STOP_FILE" ] && exit 0; exit 143' TERM
`+resizeWorker, "--rdzv-conf=last_call_timeout=1")
	if err := nodes[1].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 75 {
			t.Errorf("node %d exit %d; want 75 (preempted)", i, code)
		}
	}
	if n := len(ups(dir)); n != 4 {
		t.Errorf("%d worker starts; want the first round's 4 only", n)
	}
}

// TestStopOutlivesTheStoreHost: the node hosting the store is killed
// while a stop request runs out its grace on the other node (whose
// workers ignore the stop): that node still stops its workers and exits
// 143 promptly, instead of retrying its report to the gone store for
// connect_timeout (60 s).
func TestStopOutlivesTheStoreHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	script := writeScript(t, `trap '' TERM
touch "$1/up.$RANK.$$"
while :; do sleep 0.05; done
`)
	args := func(i int) []string {
		return append(elasticArgs(ep, "stop-host", i, "--nnodes=2", "--nproc-per-node=1", "--preempt-grace=2s", "--stop-timeout=1s", "--no-python", script), dir)
	}
	nodes := startNodes(t, 2, args)
	logNodesOnFailure(t, nodes)
	waitFor(t, "both workers", func() bool { m, _ := filepath.Glob(filepath.Join(dir, "up.*")); return len(m) == 2 })
	host, other := nodes[0], nodes[1]
	if !strings.Contains(host.stderr.String(), "hosting the job's embedded etcd") {
		host, other = other, host
	}
	if err := other.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the store host to learn the stop request", func() bool { return strings.Contains(host.stderr.String(), "the job is asked to stop") })
	if err := host.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = host.cmd.Wait()
	killed := time.Now()
	if code := waitExit(t, other.cmd); code != 143 {
		t.Errorf("exit %d; want 143 (stopped past the grace)", code)
	}
	if took := time.Since(killed); took > 30*time.Second {
		t.Errorf("the node took %v to exit after the store host died; want well under connect_timeout", took)
	}
}
