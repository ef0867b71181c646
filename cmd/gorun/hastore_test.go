package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gorun-dev/gorun/internal/testkit/timing"

	"github.com/gorun-dev/gorun/internal/testkit/nettest"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// freePortPair returns a port p such that p and p+1 are free on each of
// the hosts 127.0.0.[1-n] now: a store member's client and peer ports.
func freePortPair(t *testing.T, n int) int {
	t.Helper()
	for range 1000 {
		p := 20000 + rand.IntN(20000)
		free := true
		for i := 1; i <= n && free; i++ {
			for _, port := range []int{p, p + 1} {
				ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%d", i, port))
				if err != nil {
					free = false
					break
				}
				ln.Close()
			}
		}
		if free {
			return p
		}
	}
	t.Fatal("no free pair of ports")
	return 0
}

// storeHostsConf is --rdzv-conf for a store of members on 127.0.0.[1-n].
func storeHostsConf(n int, extra string) string {
	var hosts []string
	for i := 1; i <= n; i++ {
		hosts = append(hosts, "127.0.0."+strconv.Itoa(i))
	}
	return "--rdzv-conf=store_hosts=" + strings.Join(hosts, "+") + "," + extra
}

// haJob starts the three nodes of job run (127.0.0.[1-3], each hosting a
// member of the store), whose workers run script with the job's folder,
// and waits for its first 3-node round. args is node i's command line.
func haJob(t *testing.T, run, script string) (dir string, nodes []*node, args func(i int) []string) {
	ttl := timing.Seconds(timing.LeaseTTL(t)) // --rdzv-conf=lease_ttl
	t.Helper()
	dir = t.TempDir()
	ep := fmt.Sprintf("127.0.0.1:%d", freePortPair(t, 3))
	conf := storeHostsConf(3, "lease_ttl="+ttl+",last_call_timeout=1")
	args = func(i int) []string {
		return append(elasticArgs(ep, run, i, "--nnodes=2:3", "--max-restarts=1", conf, "--no-python", script), dir)
	}
	nodes = startNodes(t, 3, args)
	logNodesOnFailure(t, nodes)
	waitStarts(t, dir, "0.3.0", "1.3.0", "2.3.0")
	return dir, nodes, args
}

// TestStoreSurvivesItsFirstHost: three nodes, the embedded store's three
// members on them. SIGKILL of the agent on the node that hosts member 0
// (the endpoint's host, which was the whole store before) leaves a 2-node
// job: the other two re-form without it and complete.
func TestStoreSurvivesItsFirstHost(t *testing.T) {
	t.Parallel()
	// The 3-node round runs until it is stopped; the 2-node one completes.
	dir, nodes, _ := haJob(t, "ha", startWorker(t, `[ "$WORLD_SIZE" = 3 ] && exec sleep 300
exit 0`))
	for i, n := range nodes {
		if want := fmt.Sprintf("member %d of the job's store serves", i); !strings.Contains(n.stderr.String(), want) {
			t.Fatalf("node %d does not host member %d:\n%s", i, i, n.stderr)
		}
	}
	if err := nodes[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitExit(t, nodes[0].cmd)
	for i, n := range nodes[1:] {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Fatalf("node %d exit %d after losing node 0 and its member\n%s", i+1, code, n.stderr)
		}
	}
	checkTwoNodeRound(t, dir)
}

// memberPid is the pid of the store member that node's log last said
// serves, 0 if none.
func memberPid(n *node) int { return proctest.StoreMemberPid(n.stderr.String()) }

// TestStoreMemberKilledComesBack: the store's members run apart from the
// agents. SIGKILL of a member's process alone does not stop the job (nor
// end its round, the leader's included): its agent starts it again from
// its data and it rejoins the store as the same member. Each member in
// turn; then, when the agent hosting member 1 is killed, members 0 and 2
// are still a majority, and the two nodes left re-form and complete.
func TestStoreMemberKilledComesBack(t *testing.T) {
	t.Parallel()
	dir, nodes, _ := haJob(t, "member", startWorker(t, `[ "$WORLD_SIZE" = 3 ] && exec sleep 300
exit 0`))
	// One member after the other, so that the leader's is killed too.
	for i, n := range nodes {
		first := memberPid(n)
		if first == 0 {
			t.Fatalf("node %d does not say its member's pid:\n%s", i, n.stderr)
		}
		if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("member %d started again", i), func() bool {
			pid := memberPid(n)
			return pid != 0 && pid != first
		})
		if want := fmt.Sprintf("member %d of the job's store was killed (killed); starting it again", i); !strings.Contains(n.stderr.String(), want) {
			t.Fatalf("node %d does not say its member was killed:\n%s", i, n.stderr)
		}
	}
	if got := starts(dir); len(got) != 3 {
		t.Fatalf("starts %v after the members' kills; want the 3-node round only (the job goes on)", got)
	}
	if err := nodes[1].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitExit(t, nodes[1].cmd)
	for _, i := range []int{0, 2} {
		if code := waitExit(t, nodes[i].cmd); code != 0 {
			t.Fatalf("node %d exit %d after losing node 1\n%s", i, code, nodes[i].stderr)
		}
	}
	checkTwoNodeRound(t, dir)
}

// TestStoreSurvivesACutOfItsFirstHost: three hosts (network namespaces),
// the store's three members on them. Cutting the network of the host of
// member 0 leaves the other two a majority: they re-form without it and
// complete. Healed, the cut host's agent ends too.
func TestStoreSurvivesACutOfItsFirstHost(t *testing.T) {
	t.Parallel()
	hosts := nettest.NewHosts(t, 3)
	dir := t.TempDir()
	const port = 29400 // each host has its own addresses: nothing else binds there
	ep := fmt.Sprintf("%s:%d", hosts.Addr(0), port)
	script := startWorker(t, `[ "$WORLD_SIZE" = 3 ] && exec sleep 300
exit 0`)
	members := hosts.Addr(0) + "+" + hosts.Addr(1) + "+" + hosts.Addr(2)
	var nodes []*node
	for i := range 3 {
		args := []string{gorunBin, "--rdzv-backend=c10d", "--rdzv-endpoint=" + ep, "--rdzv-id=cut", "--local-addr=" + hosts.Addr(i),
			"--log-level=debug", "--nnodes=2:3", "--max-restarts=1",
			"--rdzv-conf=store_hosts=" + members + ",lease_ttl=5,last_call_timeout=1,connect_timeout=10",
			"--no-python", script, dir}
		nodes = append(nodes, startOnHost(t, hosts, i, testEnv(), args...))
	}
	logNodesOnFailure(t, nodes)
	waitStarts(t, dir, "0.3.0", "1.3.0", "2.3.0")
	hosts.Cut(t, 0)
	for i, n := range nodes[1:] {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Fatalf("node %d exit %d after the cut of node 0\n%s", i+1, code, n.stderr)
		}
	}
	checkTwoNodeRound(t, dir)
	hosts.Heal(t, 0)
	waitExit(t, nodes[0].cmd) // any verdict, but an end: its store's majority is gone
}

// startOnHost starts argv on namespace host i with env, in a process
// group of its own, killed when the test ends.
func startOnHost(t *testing.T, hosts *nettest.Hosts, i int, env []string, argv ...string) *node {
	t.Helper()
	cmd, stdout, stderr := startCmd(t, hosts.Command(context.Background(), i, argv...), env)
	return &node{cmd, stdout, stderr}
}

// checkTwoNodeRound checks that ranks 0 and 1 of a 2-node world started
// once each (at whatever restart count): the survivors re-formed.
func checkTwoNodeRound(t *testing.T, dir string) {
	t.Helper()
	got := starts(dir)
	twoNode := 0
	for k, n := range got {
		if strings.HasPrefix(k, "0.2.") || strings.HasPrefix(k, "1.2.") {
			twoNode += n
		}
	}
	if twoNode != 2 {
		t.Errorf("starts %v; want ranks 0 and 1 of a 2-node world once each", got)
	}
}

// logNodesOnFailure logs every node's stderr if the test fails.
func logNodesOnFailure(t *testing.T, nodes []*node) {
	t.Cleanup(func() {
		if t.Failed() {
			for i, n := range nodes {
				t.Logf("node %d:\n%s", i, n.stderr)
			}
		}
	})
}

// TestStoreHostComesBack: the agent hosting member 0 is SIGKILLed (its
// member's data goes with it) and started again on the same host: the
// survivors went on without it, and the new agent joins the job as a
// client of the other members (a member that starts afresh cannot rejoin
// a store that has moved on); the job, scaled up to 3 nodes again,
// completes.
func TestStoreHostComesBack(t *testing.T) {
	t.Parallel()
	// Rounds run until they are stopped, but for a 3-node one once node 0
	// is back.
	dir, nodes, args := haJob(t, "back", startWorker(t, `[ -e "$1/back" ] && [ "$WORLD_SIZE" = 3 ] && exit 0
exec sleep 300`))
	if err := nodes[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitExit(t, nodes[0].cmd)
	waitFor(t, "a 2-node round", func() bool {
		got := starts(dir)
		return got["0.2.0"]+got["1.2.0"]+got["0.2.1"]+got["1.2.1"] > 0
	})
	if err := os.WriteFile(filepath.Join(dir, "back"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, _, stderr := startGorun(t, testEnv(), args(0)...)
	back := &node{cmd, nil, stderr}
	logNodesOnFailure(t, []*node{back})
	for i, n := range []*node{back, nodes[1], nodes[2]} {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Fatalf("node %d exit %d\n%s", i, code, n.stderr)
		}
	}
}

// TestStoreMembersOutliveTheSchedulersSIGTERM: Slurm's scancel (and its
// time limit) sends SIGTERM to every process of the step, the store's
// members too. The members ignore it and serve until their agents stop
// them, so the stop request completes: the workers save and every agent
// exits 75 (it used to exit 1 after 30 s, its store gone).
func TestStoreMembersOutliveTheSchedulersSIGTERM(t *testing.T) {
	t.Parallel()
	// The trap comes before the start is recorded: the test signals as
	// soon as it sees every start.
	_, nodes, _ := haJob(t, "sigterm", writeScript(t, "trap : TERM\n"+recordStart+`while [ ! -e "$GORUN_STOP_FILE" ]; do sleep 0.02; done
exit 0`))
	var pids []int
	for i, n := range nodes {
		pid := memberPid(n)
		if pid == 0 {
			t.Fatalf("node %d does not say its member's pid:\n%s", i, n.stderr)
		}
		pids = append(pids, pid, n.cmd.Process.Pid)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != preemptExit {
			t.Errorf("node %d exit %d; want %d\n%s", i, code, preemptExit, n.stderr)
		}
	}
}
