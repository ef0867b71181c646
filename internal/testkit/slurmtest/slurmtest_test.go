package slurmtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/leakcheck"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m, 5*time.Second)) }

// TestCluster starts one cluster and proves what tests rely on: srun on
// every node, Slurm's variables, names, batch jobs, scancel, fake GPUs,
// preemption, and gorun itself across two nodes.
func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := Start(t, Options{})
	t.Logf("cluster %s up in %v: nodes %v at %s..%s", c.Name(), time.Since(start).Round(time.Millisecond), c.Nodes(), c.Addr(0), c.Addr(len(c.Nodes())-1))
	nodes := c.Nodes()
	ctxFor := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("config", func(t *testing.T) {
		out, _, err := Output(c.Command(ctxFor(t), "scontrol", "show", "config"))
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`\nKillWait\s+= 30 sec\n`).MatchString(out) {
			t.Errorf("KillWait is not Slurm's default 30 s:\n%s", out)
		}
	})

	t.Run("hostname", func(t *testing.T) {
		out, _, err := c.Srun(ctxFor(t), "-N3", "--ntasks-per-node=1", "hostname")
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Fields(out)
		slices.Sort(got)
		if !slices.Equal(got, nodes) {
			t.Fatalf("hostname on each node: %q; want %q", got, nodes)
		}
	})

	t.Run("variables", func(t *testing.T) {
		out, _, err := c.Srun(ctxFor(t), "-N3", "--ntasks-per-node=1", "sh", "-c", "echo $SLURM_NODEID $SLURMD_NODENAME $SLURM_STEP_NODELIST $SLURM_JOB_ID $SLURM_STEP_ID")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		slices.Sort(lines)
		if len(lines) != 3 {
			t.Fatalf("want 3 lines, got %q", out)
		}
		job := strings.Fields(lines[0])[3]
		for i, l := range lines {
			want := fmt.Sprintf("%d %s %s-n[0-2] %s 0", i, nodes[i], c.Name(), job)
			if l != want {
				t.Errorf("node %d: %q; want %q", i, l, want)
			}
		}
	})

	t.Run("names", func(t *testing.T) {
		out, _, err := Output(c.OnNode(ctxFor(t), 1, "sh", "-c", "hostname; getent hosts "+nodes[0]))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(out)
		if len(f) < 3 || f[0] != nodes[1] || f[1] != c.Addr(0) || f[2] != nodes[0] {
			t.Fatalf("on node 1, `hostname; getent hosts %s`: %q; want %s, then %s %s", nodes[0], out, nodes[1], c.Addr(0), nodes[0])
		}
	})

	t.Run("sbatch", func(t *testing.T) {
		ctx := ctxFor(t)
		id, err := c.Sbatch(ctx, "#!/bin/sh\n#SBATCH -N 2\nsrun --ntasks-per-node=1 hostname\n")
		if err != nil {
			t.Fatal(err)
		}
		state, err := c.WaitJobGone(ctx, id)
		if err != nil || state != "COMPLETED" {
			t.Fatalf("job %s: %s, %v", id, state, err)
		}
		data, err := os.ReadFile(filepath.Join(c.Dir(), "slurm-"+id+".out"))
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Fields(string(data))
		slices.Sort(got)
		if !slices.Equal(got, nodes[:2]) {
			t.Fatalf("batch job's output: %q; want %q", data, nodes[:2])
		}
	})

	t.Run("scancel", func(t *testing.T) {
		ctx := ctxFor(t)
		id, err := c.Sbatch(ctx, "#!/bin/sh\nsrun --ntasks-per-node=1 sleep 300\n", "-N2")
		if err != nil {
			t.Fatal(err)
		}
		waitSleeps(ctx, t, c, 2)
		if err := c.Scancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		if state, err := c.WaitJobGone(ctx, id); err != nil || state != "CANCELLED" {
			t.Fatalf("job %s: %s, %v", id, state, err)
		}
		waitNoProcesses(t, c)
	})

	t.Run("gpus", func(t *testing.T) {
		out, _, err := c.Srun(ctxFor(t), "-N2", "--gpus-per-node=2", "env")
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count("\n"+out, "\nSLURM_GPUS_ON_NODE=2\n"); n != 2 {
			t.Fatalf("SLURM_GPUS_ON_NODE=2 on %d nodes, want 2:\n%s", n, out)
		}
	})

	t.Run("preempt", func(t *testing.T) {
		ctx := ctxFor(t)
		id, err := c.Sbatch(ctx, "#!/bin/sh\nsrun sleep 300\n", "-N3", "--exclusive")
		if err != nil {
			t.Fatal(err)
		}
		waitSleeps(ctx, t, c, 3)
		if out, _, err := c.Srun(ctx, "-p", PartitionHigh, "-N1", "--exclusive", "hostname"); err != nil {
			t.Fatalf("the high-priority job: %v (%s)", err, out)
		}
		if state, err := c.WaitJobGone(ctx, id); err != nil || state != "PREEMPTED" {
			t.Fatalf("low-priority job %s: %s, %v", id, state, err)
		}
		waitNoProcesses(t, c)
	})

	t.Run("gorun", func(t *testing.T) {
		gorun, hello := filepath.Join(c.BinDir(), "gorun"), filepath.Join(c.BinDir(), "hello")
		for _, b := range []string{gorun, hello} {
			if _, err := os.Stat(b); err != nil {
				t.Fatalf("%v: run `make build` first (make test-slurm does)", err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := c.Command(ctx, "srun", "-N2", "--ntasks-per-node=1", gorun, "--nproc-per-node=2", "--no-python", hello)
		cmd.Env = append(cmd.Env, "GORUN_RDZV_TOKEN="+Token(t))
		start := time.Now()
		out, stderr, err := Output(cmd)
		if err != nil {
			t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
		}
		for r := range 4 {
			if !strings.Contains(out, fmt.Sprintf("rank %d of 4 ", r)) {
				t.Errorf("no worker of rank %d:\nstdout:\n%s\nstderr:\n%s", r, out, stderr)
			}
		}
		if n := strings.Count(out, ":finished"); n != 4 {
			t.Errorf("%d workers finished, want 4:\n%s", n, out)
		}
		t.Logf("2 nodes x 2 workers under srun in %v", time.Since(start).Round(time.Millisecond))
		waitNoProcesses(t, c)
	})
}

// TestCleanup: a cluster whose job ignores SIGTERM (and outlives the 3 s
// its cleanup gives jobs) leaves nothing behind: no process, namespace,
// /etc/hosts line or folder. It runs beside TestCluster: two clusters at
// once must not meet.
func TestCleanup(t *testing.T) {
	t.Parallel()
	var (
		c    *Cluster
		pids []int
	)
	t.Run("cluster", func(t *testing.T) {
		c = Start(t, Options{Nodes: 2, KillWait: 40 * time.Second, GraceTime: time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, _, err := Output(c.Command(ctx, "scontrol", "show", "config"))
		if err != nil || !regexp.MustCompile(`\nKillWait\s+= 40 sec\n`).MatchString(out) {
			t.Errorf("KillWait is not 40 s (%v):\n%s", err, out)
		}
		out, _, err = Output(c.Command(ctx, "scontrol", "show", "partition", PartitionLow))
		if err != nil || !strings.Contains(out, "GraceTime=1 ") {
			t.Errorf("the low partition's GraceTime is not 1 s (%v):\n%s", err, out)
		}
		if _, err := c.Sbatch(ctx, "#!/bin/sh\nsrun sh -c \"trap '' TERM; sleep 300\"\n", "-N2"); err != nil {
			t.Fatal(err)
		}
		waitSleeps(ctx, t, c, 2)
		for i := range c.Nodes() {
			for _, p := range c.Processes(i) {
				pids = append(pids, p.PID)
			}
		}
		for _, d := range append([]*daemon{c.munged, c.ctld}, c.slurmds...) {
			pids = append(pids, d.cmd.Process.Pid)
		}
	})
	if c == nil {
		t.Skip("SKIPPED: the cluster did not start (see the subtest)")
	}
	for _, pid := range pids {
		if !proctest.Gone(pid) {
			p, _ := process(pid)
			t.Errorf("process left after cleanup: %v", p)
		}
	}
	hosts, err := os.ReadFile(hostsFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(hosts), c.Name()) {
		t.Errorf("%s still names %s:\n%s", hostsFile, c.Name(), hosts)
	}
	for i := range c.Nodes() {
		if _, err := os.Stat("/run/netns/" + c.hosts.Namespace(i)); err == nil {
			t.Errorf("network namespace %s left", c.hosts.Namespace(i))
		}
	}
	if _, err := os.Stat(c.dir); err == nil {
		t.Errorf("folder %s left", c.dir)
	}
}

// waitSleeps waits until n nodes run the job's `sleep 300`.
func waitSleeps(ctx context.Context, t *testing.T, c *Cluster, n int) {
	t.Helper()
	proctest.WaitFor(t, fmt.Sprintf("sleep 300 on %d nodes", n), 30*time.Second, func() bool {
		found := 0
		for i := range c.Nodes() {
			for _, p := range c.Processes(i) {
				if strings.HasSuffix(p.Cmdline, "sleep 300") && !strings.Contains(p.Cmdline, "srun") {
					found++
					break
				}
			}
		}
		return found == n || ctx.Err() != nil
	})
}

// waitNoProcesses waits until no node runs anything but its slurmd.
func waitNoProcesses(t *testing.T, c *Cluster) {
	t.Helper()
	var left []Process
	deadline := time.Now().Add(15 * time.Second)
	for {
		left = nil
		for i := range c.Nodes() {
			left = append(left, c.Processes(i)...)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left on the nodes: %v", left)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
}
