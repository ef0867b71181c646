package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/timing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/internal/testkit/nettest"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// freePort returns a port free on addr now.
func freePort(t *testing.T, addr string) int { return proctest.FreePort(t, addr) }

// startWorker records every worker start in $1 as a file named
// <rank>.<world>.<restart>.<pid> holding group rank and master, then runs
// the rest of its script.
func startWorker(t *testing.T, rest string) string {
	return writeScript(t, recordStart+rest)
}

// recordStart is startWorker's first line: the record of a start.
const recordStart = `echo "$GROUP_RANK $MASTER_ADDR:$MASTER_PORT" > "$1/$RANK.$WORLD_SIZE.$TORCHELASTIC_RESTART_COUNT.$$"
`

// starts lists the recorded starts as rank.world.restart (without pid).
func starts(dir string) map[string]int {
	files, _ := filepath.Glob(filepath.Join(dir, "*.*.*.*"))
	out := map[string]int{}
	for _, f := range files {
		parts := strings.Split(filepath.Base(f), ".")
		out[strings.Join(parts[:3], ".")]++
	}
	return out
}

// waitStarts waits until every rank.world.restart in want was recorded.
func waitStarts(t *testing.T, dir string, want ...string) {
	t.Helper()
	waitNewStarts(t, dir, nil, want...)
}

// waitNewStarts waits until every rank.world.restart in want was recorded
// more often than in before.
func waitNewStarts(t *testing.T, dir string, before map[string]int, want ...string) {
	t.Helper()
	waitFor(t, "worker starts "+strings.Join(want, " "), func() bool {
		got := starts(dir)
		for _, w := range want {
			if got[w] <= before[w] {
				return false
			}
		}
		return true
	})
}

type node struct {
	cmd            *exec.Cmd
	stdout, stderr *proctest.Buffer
}

// startNodes starts one gorun agent per loopback address 127.0.0.<i+1>.
func startNodes(t *testing.T, n int, args func(i int) []string) []*node {
	t.Helper()
	var nodes []*node
	for i := range n {
		cmd, out, errb := startGorun(t, testEnv(), args(i)...)
		nodes = append(nodes, &node{cmd, out, errb})
	}
	return nodes
}

func elasticArgs(endpoint, run string, i int, extra ...string) []string {
	return append([]string{"--rdzv-backend=c10d", "--rdzv-endpoint=" + endpoint, "--rdzv-id=" + run,
		"--local-addr=127.0.0." + strconv.Itoa(i+1), "--log-level=debug"}, extra...)
}

func TestElasticUniqueRanksOneMaster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	script := startWorker(t, "")
	nodes := startNodes(t, 3, func(i int) []string {
		return append(elasticArgs(ep, "ranks", i, "--nnodes=3", "--nproc-per-node=2", "--no-python", script), dir)
	})
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Fatalf("node %d exit %d\n%s", i, code, n.stderr)
		}
	}
	got := starts(dir)
	masters := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		masters[strings.Fields(string(b))[1]] = true
	}
	for r := range 6 {
		if got[fmt.Sprintf("%d.6.0", r)] != 1 {
			t.Errorf("rank %d started %d times with WORLD_SIZE=6; starts %v", r, got[fmt.Sprintf("%d.6.0", r)], got)
		}
	}
	if len(masters) != 1 {
		t.Errorf("masters %v; want one", masters)
	}
}

func TestElasticFailureRestartsEveryNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	script := startWorker(t, `if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  if [ "$RANK" = 1 ]; then while [ ! -e "$1/0.2.0."* ]; do sleep 0.01; done; exit 3; fi
  exec sleep 60
fi`)
	nodes := startNodes(t, 2, func(i int) []string {
		return append(elasticArgs(ep, "fail", i, "--nnodes=2", "--max-restarts=1", "--no-python", script), dir)
	})
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Fatalf("node %d exit %d\n%s", i, code, n.stderr)
		}
	}
	got := starts(dir)
	for _, k := range []string{"0.2.0", "1.2.0", "0.2.1", "1.2.1"} {
		if got[k] != 1 {
			t.Errorf("start %s seen %d times; starts %v", k, got[k], got)
		}
	}
}

// TestElasticFailureExitCodeOnEveryNode: a worker that fails with no
// restart left ends the job with its exit code on every node, the nodes
// whose workers were only stopped included (srun and batch scripts read
// one code for the job).
func TestElasticFailureExitCodeOnEveryNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	script := startWorker(t, `if [ "$RANK" = 1 ]; then while [ ! -e "$1/0.2.0."* ]; do sleep 0.01; done; exit 3; fi
exec sleep 60`)
	nodes := startNodes(t, 2, func(i int) []string {
		return append(elasticArgs(ep, "exitcode", i, "--nnodes=2", "--max-restarts=0", "--no-python", script), dir)
	})
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 3 {
			t.Errorf("node %d exit %d; want the failed worker's 3\n%s", i, code, n.stderr)
		}
	}
	// Ranks follow arrival: either node may run rank 1.
	if s := nodes[0].stderr.String() + nodes[1].stderr.String(); !strings.Contains(s, "failed on another node") || !strings.Contains(s, "exit code 3") {
		t.Errorf("no node says the job failed on the other with exit code 3:\n%s", s)
	}
}

func TestElasticLostNodeSurvivorsReform(t *testing.T) {
	t.Parallel()
	ttl := timing.Seconds(timing.LeaseTTL(t)) // --rdzv-conf=lease_ttl
	dir := t.TempDir()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	script := startWorker(t, `exec sleep 60`)
	nodes := startNodes(t, 3, func(i int) []string {
		return append(elasticArgs(ep, "lost", i, "--nnodes=2:3", "--rdzv-conf=lease_ttl="+ttl+",last_call_timeout=0.3",
			"--stop-timeout=2s", "--no-python", script), dir)
	})
	waitStarts(t, dir, "0.3.0", "1.3.0", "2.3.0")
	// kill -9 a node that does not host the store; its workers die with it.
	victim := nodes[2]
	before := starts(dir)
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	waitExit(t, victim.cmd)
	waitNewStarts(t, dir, before, "0.2.0", "1.2.0")
	for _, n := range nodes[:2] {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, n := range nodes[:2] {
		if code := waitExit(t, n.cmd); code != 143 {
			t.Errorf("node %d exit %d; want 143\n%s", i, code, n.stderr)
		}
	}
	if !strings.Contains(nodes[0].stderr.String()+nodes[1].stderr.String(), "was lost: its lease ended") {
		t.Errorf("no node reported the lost node:\n%s\n%s", nodes[0].stderr, nodes[1].stderr)
	}
}

func TestElasticLateJoinerScalesUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	script := startWorker(t, `exec sleep 60`)
	args := func(i int) []string {
		return append(elasticArgs(ep, "late", i, "--nnodes=2:3", "--rdzv-conf=last_call_timeout=0.3", "--stop-timeout=2s", "--no-python", script), dir)
	}
	nodes := startNodes(t, 2, args)
	logNodesOnFailure(t, nodes)
	waitStarts(t, dir, "0.2.0", "1.2.0")
	late, _, lateErr := startGorun(t, testEnv(), args(2)...)
	waitStarts(t, dir, "0.3.0", "1.3.0", "2.3.0")
	all := []*exec.Cmd{nodes[0].cmd, nodes[1].cmd, late}
	for _, c := range all {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range all {
		if code := waitExit(t, c); code != 143 {
			t.Errorf("exit %d; want 143\nlate node:\n%s", code, lateErr)
		}
	}
}

// TestElasticMismatchedNodeRefused: a node whose job shape differs (its
// --max-restarts) is refused with the difference named, exit 2.
func TestElasticMismatchedNodeRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	script := startWorker(t, "")
	first := startNodes(t, 1, func(i int) []string {
		return append(elasticArgs(ep, "shape", i, "--nnodes=2", "--max-restarts=1", "--no-python", script), dir)
	})[0]
	waitFor(t, "the store to be hosted", func() bool { return strings.Contains(first.stderr.String(), "hosting") })
	r := runGorun(t, testEnv(), append(elasticArgs(ep, "shape", 1, "--nnodes=2", "--max-restarts=2", "--no-python", script), dir)...)
	if r.code != 2 || !strings.Contains(r.stderr, "--max-restarts: this node has 2, the job has 1") {
		t.Errorf("mismatched node: exit %d\n%s", r.code, r.stderr)
	}
	_ = first.cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, first.cmd)
}

func TestElasticStoreHostLostIsReported(t *testing.T) {
	t.Parallel()
	ttl := timing.Seconds(timing.LeaseTTL(t)) // --rdzv-conf=lease_ttl
	dir := t.TempDir()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	script := startWorker(t, `exec sleep 60`)
	nodes := startNodes(t, 2, func(i int) []string {
		return append(elasticArgs(ep, "host", i, "--nnodes=2", "--rdzv-conf=join_timeout=3,lease_ttl="+ttl, "--stop-timeout=2s", "--no-python", script), dir)
	})
	waitStarts(t, dir, "0.2.0", "1.2.0")
	_ = nodes[0].cmd.Process.Signal(syscall.SIGKILL) // the host of the store
	waitExit(t, nodes[0].cmd)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("survivor's log:\n%s", nodes[1].stderr)
		}
	})
	code := waitExit(t, nodes[1].cmd)
	msg := nodes[1].stderr.String()
	if code == 0 || !strings.Contains(msg, ep) || !strings.Contains(msg, "hosted by the agent on that host, refuses connections") {
		t.Errorf("survivor exit %d; want a failure naming the store at %s:\n%s", code, ep, msg)
	}
}

// etcdServer starts Debian's etcd (etcd-server) on free loopback ports,
// serving clients over scheme (http or https) with extra flags.
func etcdServer(t *testing.T, scheme string, extra ...string) (endpoint string, stop func(), restart func()) {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("GORUN_REQUIRE_ETCD") == "1" {
			t.Fatal("etcd (Debian's etcd-server) is not installed")
		}
		t.Skip("!!!!!!!! SKIPPED: etcd (Debian's etcd-server) is not installed")
	}
	data := t.TempDir()
	client, peer := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
	endpoint = fmt.Sprintf("127.0.0.1:%d", client)
	var cmd *exec.Cmd
	start := func() {
		args := append([]string{"--name=test", "--data-dir=" + data,
			"--listen-client-urls=" + scheme + "://" + endpoint, "--advertise-client-urls=" + scheme + "://" + endpoint,
			fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", peer), fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", peer),
			fmt.Sprintf("--initial-cluster=test=http://127.0.0.1:%d", peer), "--heartbeat-interval=10", "--election-timeout=100", "--log-level=error"},
			extra...)
		cmd = exec.Command(bin, args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "etcd to listen", func() bool {
			c, err := net.Dial("tcp", endpoint)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	start()
	t.Cleanup(stop)
	return endpoint, stop, start
}

func TestElasticExternalEtcdSurvivesRestart(t *testing.T) {
	t.Parallel()
	ep, stop, restart := etcdServer(t, "http")
	// The agents reach etcd through a proxy that counts their attempts to
	// reconnect while it is down.
	proxy := nettest.NewProxy(t, ep)
	dir := t.TempDir()
	script := startWorker(t, `while [ ! -e "$1/go" ]; do sleep 0.02; done`)
	nodes := startNodes(t, 2, func(i int) []string {
		return append([]string{"--rdzv-backend=etcd", "--rdzv-endpoint=" + proxy.Addr(), "--rdzv-id=ext", "--nnodes=2",
			"--local-addr=127.0.0." + strconv.Itoa(i+1), "--no-python", script}, dir)
	})
	waitStarts(t, dir, "0.2.0", "1.2.0")
	stop()
	// Down until the agents found it gone (well within the lease TTL).
	waitFor(t, "the agents to find etcd down", func() bool { return proxy.FailedDials() >= 2 })
	restart()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Errorf("node %d exit %d\n%s", i, code, n.stderr)
		}
	}
	if got := starts(dir); got["0.2.0"] != 1 || got["1.2.0"] != 1 || len(got) != 2 {
		t.Errorf("starts %v; want each rank once, not restarted", got)
	}
}

// TestStoreCommand runs `gorun store` (through gorun-etcd) and stops it.
func TestStoreCommand(t *testing.T) {
	t.Parallel()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	cmd, out, errb := startGorun(t, testEnv(), "store", "--listen", ep)
	waitFor(t, "the store to serve", func() bool { return strings.Contains(out.String(), "serving at") })
	_ = cmd.Process.Signal(syscall.SIGINT)
	if code := waitExit(t, cmd); code != 0 {
		t.Errorf("gorun store exit %d\n%s%s", code, out, errb)
	}
	// At the default level (warn) etcd's own lines that say nothing true
	// of this store are kept out.
	if strings.Contains(errb.String(), `{"level":`) {
		t.Errorf("gorun store printed etcd's log lines at its default level:\n%s", errb)
	}
	if r := runGorun(t, testEnv(), "store", "--log-level=loud"); r.code != 2 || !strings.Contains(r.stderr, "--log-level") {
		t.Errorf("bad --log-level: exit %d %s", r.code, r.stderr)
	}
}

// TestBenchRendezvousRuns smoke-tests `gorun bench rendezvous` with a few
// agents (through gorun-etcd); the figures are not checked.
func TestBenchRendezvousRuns(t *testing.T) {
	t.Parallel()
	r := runGorun(t, testEnv(), "bench", "rendezvous", "--agents", "8", "--format", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"agents":8`) || !strings.Contains(r.stdout, `"floor_seconds"`) {
		t.Errorf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// TestElasticExternalEtcdWithAuth: etcd with authentication; the password
// comes from the environment, and a wrong one is refused at once.
func TestElasticExternalEtcdWithAuth(t *testing.T) {
	t.Parallel()
	ep, _, _ := etcdServer(t, "http")
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", "s3cret"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	script := startWorker(t, "")
	args := func(i int) []string {
		return append([]string{"--rdzv-backend=etcd", "--rdzv-endpoint=" + ep, "--rdzv-id=auth", "--nnodes=2",
			"--rdzv-conf=user=root", "--local-addr=127.0.0." + strconv.Itoa(i+1), "--no-python", script}, dir)
	}
	var nodes []*node
	for i := range 2 {
		cmd, out, errb := startGorun(t, testEnv("GORUN_RDZV_PASSWORD=s3cret"), args(i)...)
		nodes = append(nodes, &node{cmd, out, errb})
	}
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Fatalf("node %d exit %d\n%s", i, code, n.stderr)
		}
		if strings.Contains(n.stderr.String(), "s3cret") {
			t.Errorf("node %d logged the password:\n%s", i, n.stderr)
		}
	}
	start := time.Now()
	r := runGorun(t, testEnv("GORUN_RDZV_PASSWORD=wrong"), append(args(0), dir)...)
	if r.code == 0 || !strings.Contains(r.stderr, "authentication failed") || time.Since(start) > 20*time.Second {
		t.Errorf("wrong password: exit %d after %v\n%s", r.code, time.Since(start), r.stderr)
	}
}

// TestElasticNodeBeforeStoreHost: a node that starts before the node
// hosting the embedded store says so, waits, and joins.
func TestElasticNodeBeforeStoreHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	script := startWorker(t, "")
	args := func(i int) []string {
		return append(elasticArgs(ep, "early", i, "--nnodes=2", "--no-python", script), dir)
	}
	early, _, earlyErr := startGorun(t, testEnv(), args(1)...)
	waitFor(t, "the early node to report the missing store", func() bool {
		return strings.Contains(earlyErr.String(), "may not have started yet")
	})
	host, _, hostErr := startGorun(t, testEnv(), args(0)...)
	for _, c := range []*exec.Cmd{host, early} {
		if code := waitExit(t, c); code != 0 {
			t.Fatalf("exit %d\nhost:\n%s\nearly:\n%s", code, hostErr, earlyErr)
		}
	}
	if got := starts(dir); got["0.2.0"] != 1 || got["1.2.0"] != 1 {
		t.Errorf("starts %v", got)
	}
}

// TestElasticHangOneJobWideVerdict: two nodes of two Go workers; rank 3
// (on the second node) stops calling collectives. Every node prints the
// same job-wide verdict, merged from both nodes' flight-recorder dumps
// through etcd.
func TestElasticHangOneJobWideVerdict(t *testing.T) {
	t.Parallel()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	nodes := startNodes(t, 2, func(i int) []string {
		return elasticArgs(ep, "hang", i, "--nnodes=2", "--nproc-per-node=2", "--no-python", ddpBin,
			"--steps", "10", "--hang-rank", "3", "--hang-step", "2", "--collective-timeout", "3s")
	})
	want := "all_reduce #12 never completed; rank(s) 0, 1, 2 wait in it; rank(s) 3 never called it"
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code == 0 {
			t.Errorf("node %d succeeded", i)
		}
	}
	for i, n := range nodes {
		if s := n.stderr.String(); !strings.Contains(s, "Flight recorder, job-wide (2 nodes") || !strings.Contains(s, want) {
			t.Errorf("node %d lacks the job-wide verdict %q\n%s\nthe other node:\n%s", i, want, s, nodes[1-i].stderr.String())
		}
	}
}
