package slurmtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// End-to-end tests of gorun under a real Slurm (docs/schedulers.md,
// "Slurm" and "Stopping and preempting a job"), with bin/ddp as the
// worker: each starts its own cluster.

// gorunCluster starts a cluster of n nodes for a gorun test, after
// checking that `make build` made the binaries.
func gorunCluster(t *testing.T, n int) *Cluster {
	t.Helper()
	return gorunClusterOf(t, Options{Nodes: n})
}

// gorunClusterOf is gorunCluster with the cluster's options.
func gorunClusterOf(t *testing.T, opts Options) *Cluster {
	t.Helper()
	c := Start(t, opts)
	for _, b := range []string{"gorun", "ddp", "hello"} {
		if _, err := os.Stat(filepath.Join(c.BinDir(), b)); err != nil {
			t.Fatalf("%v: run `make build` first (make test-slurm does)", err)
		}
	}
	return c
}

func deadline(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ddpJob is a 2-node batch script that exports a fresh token and runs
// body; $OUT is a fresh folder that holds each node's output
// (node-N.out, written by slurmstepd on the node, so it outlives srun)
// and the checkpoint folder ($OUT/ckpt); $RUN is the srun line of a training
// of 600 steps of 100 ms.
func ddpJob(t *testing.T, c *Cluster, body string) (script, out string) {
	out, err := os.MkdirTemp(c.Dir(), "out-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := c.BinDir()
	run := fmt.Sprintf("srun --ntasks-per-node=1 --output=%s/node-%%n.out %s/gorun --nproc-per-node=2 --no-python %s/ddp --steps 600 --step-time 100ms --checkpoint %s/ckpt",
		out, bin, bin, out)
	script = fmt.Sprintf("#!/bin/bash\n#SBATCH -N 2\nexport GORUN_RDZV_TOKEN=%s\nOUT=%s\nRUN=%q\n%s\n", Token(t), out, run, body)
	return script, out
}

// outputs is every node's output in dir, node by node.
func outputs(dir string) []string { return filesOf(filepath.Join(dir, "node-*.out")) }

// filesOf is the content of each file that pattern matches, in name
// order.
func filesOf(pattern string) []string {
	files, _ := filepath.Glob(pattern)
	slices.Sort(files)
	var outs []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		outs = append(outs, string(b))
	}
	return outs
}

// waitTraining waits until rank 0 has printed step 3 in dir's outputs.
func waitTraining(ctx context.Context, t *testing.T, dir string) {
	t.Helper()
	for !strings.Contains(strings.Join(outputs(dir), ""), "step 3 loss") {
		select {
		case <-ctx.Done():
			t.Fatalf("no step 3 in the job's output: %v\n%s", ctx.Err(), strings.Join(outputs(dir), "\n----\n"))
		case <-time.After(100 * time.Millisecond): // polling with a deadline
		}
	}
}

// checkPreempted: every node's gorun says the job stopped cleanly and
// exits 75, rank 0 saved a checkpoint, and no worker took the stop
// signal for a flight recorder dump request.
func checkPreempted(t *testing.T, dir string, nodes int) {
	t.Helper()
	outs := outputs(dir)
	all := strings.Join(outs, "\n----\n")
	if len(outs) != nodes {
		t.Errorf("%d node outputs, want %d:\n%s", len(outs), nodes, all)
	}
	for i, o := range outs {
		if !strings.Contains(o, "preempted cleanly") || !strings.Contains(o, "exiting 75") {
			t.Errorf("node %d's gorun did not stop cleanly with 75:\n%s", i, o)
		}
	}
	if !strings.Contains(all, "preempted: saved step") {
		t.Errorf("ddp saved no checkpoint:\n%s", all)
	}
	if strings.Contains(all, "flight recorder dumped") {
		t.Errorf("a worker dumped its flight recorder on a stop request:\n%s", all)
	}
	if _, err := os.Stat(filepath.Join(dir, "ckpt", "ddp.ckpt")); err != nil {
		t.Errorf("checkpoint: %v\n%s", err, all)
	}
}

func batchOutput(c *Cluster, id string) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir(), "slurm-"+id+".out"))
	return string(b)
}

// TestSlurmThreeNodes: 3 nodes x 2 workers, world 6, with the token
// exported and with no token line at all (the nodes share it through the
// home folder). A 3-member store given host names used to fail:
// "expected IP in URL for binding".
func TestSlurmThreeNodes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		env  func(t *testing.T) []string
	}{
		{"token exported", func(t *testing.T) []string { return []string{"GORUN_RDZV_TOKEN=" + Token(t)} }},
		{"no token line", func(t *testing.T) []string { return []string{"HOME=" + t.TempDir()} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := gorunCluster(t, 3)
			ctx := deadline(t, 60*time.Second)
			cmd := c.Command(ctx, "srun", "-N3", "--ntasks-per-node=1", filepath.Join(c.BinDir(), "gorun"), "--nproc-per-node=2", "--no-python",
				filepath.Join(c.BinDir(), "ddp"), "--steps", "20")
			cmd.Env = append(cmd.Env, tt.env(t)...)
			start := time.Now()
			out, stderr, err := Output(cmd)
			if err != nil {
				t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
			}
			if !strings.Contains(out, "world=6") || !strings.Contains(out, "final loss=") {
				t.Fatalf("no final line of a world of 6:\nstdout:\n%s\nstderr:\n%s", out, stderr)
			}
			t.Logf("3 nodes x 2 workers in %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestSlurmScancelPreempts: scancel (SIGTERM) and scancel --signal=USR1
// are stop requests: a checkpoint, and gorun exits 75 on every node.
func TestSlurmScancelPreempts(t *testing.T) {
	t.Parallel()
	c := gorunCluster(t, 2)
	for _, tc := range []struct{ name, signal string }{{"TERM", ""}, {"USR1", "--signal=USR1"}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := deadline(t, 60*time.Second)
			script, dir := ddpJob(t, c, `$RUN; echo "srun exited $?"`)
			id, err := c.Sbatch(ctx, script)
			if err != nil {
				t.Fatal(err)
			}
			waitTraining(ctx, t, dir)
			args := []string{id}
			if tc.signal != "" {
				args = []string{tc.signal, id}
			}
			if err := c.Scancel(ctx, args...); err != nil {
				t.Fatal(err)
			}
			state, err := c.WaitJobGone(ctx, id)
			if err != nil {
				t.Fatalf("%v\n%s", err, strings.Join(outputs(dir), "\n----\n"))
			}
			checkPreempted(t, dir, 2)
			if tc.signal != "" {
				// Only the step got SIGUSR1: the batch script goes on.
				if b := batchOutput(c, id); !strings.Contains(b, "srun exited 75") {
					t.Errorf("job %s (%s): the batch script's srun did not exit 75:\n%s", id, state, b)
				}
			}
		})
	}
}

// TestSlurmBatchSignalTrap: the trap of examples/slurm/train.sbatch
// forwards a SIGUSR1 sent to the batch shell alone (what
// --signal=B:USR1@T does) to srun.
func TestSlurmBatchSignalTrap(t *testing.T) {
	t.Parallel()
	c := gorunCluster(t, 2)
	ctx := deadline(t, 60*time.Second)
	// The lines of examples/slurm/train.sbatch, with $RUN for its srun.
	script, dir := ddpJob(t, c, `set -euo pipefail
$RUN &
srun_pid=$!
trap 'kill -USR1 "$srun_pid"' USR1
status=0
wait "$srun_pid" || status=$?
# A trapped signal ends the first wait early: wait for srun itself.
while kill -0 "$srun_pid" 2>/dev/null; do wait "$srun_pid" || status=$?; done
echo "batch status $status"
exit "$status"`)
	id, err := c.Sbatch(ctx, script)
	if err != nil {
		t.Fatal(err)
	}
	waitTraining(ctx, t, dir)
	if err := c.Scancel(ctx, "--batch", "--signal=USR1", id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitJobGone(ctx, id); err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(outputs(dir), "\n----\n"))
	}
	checkPreempted(t, dir, 2)
	if b := batchOutput(c, id); !strings.Contains(b, "batch status 75") {
		t.Errorf("the batch script did not end with srun's 75:\n%s", b)
	}
}

// TestSlurmGorunStopNoFlags: `gorun stop` with no flags in the batch
// script finds the job's gorun step and stops it.
func TestSlurmGorunStopNoFlags(t *testing.T) {
	t.Parallel()
	c := gorunCluster(t, 2)
	ctx := deadline(t, 60*time.Second)
	script, dir := ddpJob(t, c, fmt.Sprintf(`$RUN &
srun_pid=$!
for i in $(seq 400); do grep -qs 'step 3 loss' "$OUT"/node-*.out && break; sleep 0.1; done
%s/gorun stop; echo "gorun stop exited $?"
wait "$srun_pid"; echo "srun exited $?"`, c.BinDir()))
	id, err := c.Sbatch(ctx, script)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitJobGone(ctx, id); err != nil {
		t.Fatalf("%v\n%s\n%s", err, batchOutput(c, id), strings.Join(outputs(dir), "\n----\n"))
	}
	b := batchOutput(c, id)
	for _, want := range []string{"stop requested for job " + id + ".0", "gorun stop exited 0", "srun exited 75"} {
		if !strings.Contains(b, want) {
			t.Errorf("batch output lacks %q:\n%s", want, b)
		}
	}
	checkPreempted(t, dir, 2)
}

// TestSlurmGorunStopLeavesOtherSteps: `gorun stop` with no flags stops
// the allocation's gorun step (one node: through SIGUSR1) and leaves a
// step that runs something else alone, saying so.
func TestSlurmGorunStopLeavesOtherSteps(t *testing.T) {
	t.Parallel()
	c := gorunCluster(t, 1)
	ctx := deadline(t, 60*time.Second)
	out, err := os.MkdirTemp(c.Dir(), "out-")
	if err != nil {
		t.Fatal(err)
	}
	bin := c.BinDir()
	script := fmt.Sprintf(`#!/bin/bash
#SBATCH -N 1
#SBATCH -n 2
OUT=%s
srun -N1 -n1 --exact -c1 --output=$OUT/node-%%n.out %s/gorun --nproc-per-node=1 --no-python %s/ddp --steps 600 --step-time 100ms --checkpoint $OUT/ckpt &
g=$!
srun -N1 -n1 --exact -c1 bash -c "touch $OUT/prep; while [ ! -e $OUT/go ]; do sleep 0.1; done; echo prep done" &
p=$!
for i in $(seq 400); do grep -qs 'step 3 loss' "$OUT"/node-*.out && [ -e $OUT/prep ] && break; sleep 0.1; done
%s/gorun stop; echo "gorun stop exited $?"
wait $g; echo "gorun step exited $?"
touch $OUT/go
wait $p; echo "prep step exited $?"
`, out, bin, bin, bin)
	id, err := c.Sbatch(ctx, script)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitJobGone(ctx, id); err != nil {
		t.Fatalf("%v\n%s", err, batchOutput(c, id))
	}
	b := batchOutput(c, id)
	for _, want := range []string{"does not run gorun: left alone", "gorun stop exited 0", "gorun step exited 75", "prep done", "prep step exited 0"} {
		if !strings.Contains(b, want) {
			t.Errorf("batch output lacks %q:\n%s", want, b)
		}
	}
}

// gorunDirs is the gorun-store-* and gorun-etcd-* folders in the
// temporary folder tmp (shared by the nodes).
func gorunDirs(t *testing.T, tmp string) map[string]bool {
	t.Helper()
	m := map[string]bool{}
	for _, p := range []string{"gorun-store-*", "gorun-etcd-*"} {
		l, err := filepath.Glob(filepath.Join(tmp, p))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range l {
			m[d] = true
		}
	}
	return m
}

// TestSlurmKillLeavesNothing: a job killed with SIGKILL leaves its
// store's folders, and the next gorun on the node sweeps them. The job
// and the next gorun have a temporary folder of their own (TMPDIR), so
// no gorun of another test sweeps the folders first.
func TestSlurmKillLeavesNothing(t *testing.T) {
	t.Parallel()
	c := gorunCluster(t, 2)
	ctx := deadline(t, 60*time.Second)
	tmp, err := os.MkdirTemp(c.Dir(), "tmp-")
	if err != nil {
		t.Fatal(err)
	}
	before := gorunDirs(t, tmp)
	script, dir := ddpJob(t, c, "export TMPDIR="+tmp+"\n$RUN")
	id, err := c.Sbatch(ctx, script)
	if err != nil {
		t.Fatal(err)
	}
	waitTraining(ctx, t, dir)
	var killed []string
	for d := range gorunDirs(t, tmp) {
		if !before[d] {
			killed = append(killed, d)
		}
	}
	if len(killed) == 0 {
		t.Fatalf("the running job made no gorun-store-* or gorun-etcd-* folder in %s", tmp)
	}
	// scancel --signal=KILL is, for this Slurm, a plain cancel (the step
	// gets SIGTERM first, and gorun stops cleanly); SIGKILL what the job
	// runs, as KillWait's end or the OOM killer does, then end the job.
	var pids []int
	for i := range c.Nodes() {
		for _, p := range c.Processes(i) {
			if strings.Contains(p.Cmdline, c.BinDir()) && !strings.Contains(p.Cmdline, "srun") {
				pids = append(pids, p.PID)
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
		}
	}
	if len(pids) == 0 {
		t.Fatal("no gorun process of the job on the nodes")
	}
	// The job may have ended already: srun saw its tasks die.
	if err := c.Scancel(ctx, "--signal=KILL", id); err != nil && !strings.Contains(err.Error(), "Invalid job id") {
		t.Fatal(err)
	}
	if _, err := c.WaitJobGone(ctx, id); err != nil {
		t.Fatal(err)
	}
	var stale []string
	for _, d := range killed {
		if _, err := os.Stat(d); err == nil {
			stale = append(stale, d)
		}
	}
	if len(stale) == 0 {
		t.Fatalf("none of the killed job's folders %v is left to sweep", killed)
	}
	cmd := c.OnNode(ctx, 0, filepath.Join(c.BinDir(), "gorun"), "--standalone", "--nproc-per-node=1", "--no-python", filepath.Join(c.BinDir(), "hello"))
	cmd.Env = append(cmd.Env, "GORUN_RDZV_TOKEN="+Token(t), "TMPDIR="+tmp)
	out, stderr, err := Output(cmd)
	if err != nil {
		t.Fatalf("the next gorun on the node: %v\n%s\n%s", err, out, stderr)
	}
	var left []string
	for {
		left = left[:0]
		for _, d := range killed {
			if _, err := os.Stat(d); err == nil {
				left = append(left, d)
			}
		}
		if len(left) == 0 {
			for _, d := range stale {
				if !strings.Contains(stderr, "removed "+d+", left by a gorun that was killed") {
					t.Errorf("the next gorun does not say it removed %s:\n%s", d, stderr)
				}
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the killed job's folders %v remain after the next gorun (of %v):\n%s", left, killed, stderr)
		case <-time.After(100 * time.Millisecond): // polling with a deadline
		}
	}
}

// TestSlurmUnevenTasks: srun -N2 -n3 puts two tasks on one node; every
// node refuses at once, the one with one task naming the other.
func TestSlurmUnevenTasks(t *testing.T) {
	t.Parallel()
	c := gorunCluster(t, 2)
	ctx := deadline(t, 45*time.Second)
	cmd := c.Command(ctx, "srun", "-N2", "-n3", filepath.Join(c.BinDir(), "gorun"), "--nproc-per-node=2", "--no-python",
		filepath.Join(c.BinDir(), "ddp"), "--steps", "20")
	cmd.Env = append(cmd.Env, "GORUN_RDZV_TOKEN="+Token(t))
	start := time.Now()
	out, stderr, err := Output(cmd)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("srun -N2 -n3 succeeded:\n%s\n%s", out, stderr)
	}
	if took > 15*time.Second {
		t.Errorf("the refusal took %v, want under 15 s", took.Round(time.Millisecond))
	}
	if !strings.Contains(out+stderr, "srun started 2 tasks on node") {
		t.Errorf("no node names the node with 2 tasks:\nstdout:\n%s\nstderr:\n%s", out, stderr)
	}
	t.Logf("refused in %v", took.Round(time.Millisecond))
}
