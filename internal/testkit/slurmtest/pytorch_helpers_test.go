package slurmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/torchpy"
)

// Helpers of pytorch_test.go: real PyTorch workers (PyTorch 2.x, the
// reference, from tests/torch2's environment where it exists: torchpy.Find;
// CPU and gloo) under gorun under a real Slurm.

var torchCheck struct {
	once sync.Once
	err  error
	// python is the interpreter with torch; gorun reads PYTHON_EXEC
	// (--python).
	python string
}

// pyPython is the interpreter the PyTorch workers run on (requireTorch
// chooses it).
func pyPython() string { return torchCheck.python }

// requireTorch skips the test, saying why, where pyPython cannot import
// torch; it fails it instead where GORUN_REQUIRE_SLURM=1.
func requireTorch(t *testing.T) {
	t.Helper()
	torchCheck.once.Do(func() {
		c := torchpy.Find("../../..")
		torchCheck.python = c.Python
		if c.Missing != "" {
			torchCheck.err = errors.New(c.String())
		}
	})
	if torchCheck.err != nil {
		if os.Getenv("GORUN_REQUIRE_SLURM") == "1" {
			t.Fatalf("GORUN_REQUIRE_SLURM=1, but the PyTorch workers cannot run: %v", torchCheck.err)
		}
		t.Skipf("SKIPPED: no PyTorch for the workers: %v (make torch2-python)", torchCheck.err)
	}
}

// pyCluster starts a cluster for a PyTorch test, after checking that
// torch imports (when torch is set) and that `make build` made gorun.
func pyCluster(t *testing.T, opts Options, torch bool) *Cluster {
	t.Helper()
	if torch {
		requireTorch(t)
	}
	return gorunClusterOf(t, opts)
}

// pyCommand is c.Command with PYTHON_EXEC set for gorun.
func pyCommand(ctx context.Context, c *Cluster, name string, args ...string) *exec.Cmd {
	cmd := c.Command(ctx, name, args...)
	cmd.Env = append(cmd.Env, "PYTHON_EXEC="+pyPython())
	return cmd
}

// pyRun is one batch job: its id, its batch output's path and the folder
// of its nodes' outputs (node-*.out, written by slurmstepd on each node,
// so they outlive srun).
type pyRun struct {
	c     *Cluster
	id    string
	batch string
	nodes string
}

// sbatch submits cmd (an sbatch --parsable command line) and, should the
// test fail, logs every output of the job when it ends.
func pySbatch(t *testing.T, c *Cluster, cmd *exec.Cmd, batch, nodes string) *pyRun {
	t.Helper()
	out, _, err := Output(cmd)
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, not a job id", out)
	}
	r := &pyRun{c: c, id: id, batch: strings.ReplaceAll(batch, "%j", id), nodes: nodes}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("job %s:\n%s", id, r.all())
		}
	})
	return r
}

// outputs is every node's output, node by node.
func (r *pyRun) outputs() []string {
	return filesOf(filepath.Join(r.nodes, "node-"+r.id+"-*.out"))
}

func (r *pyRun) batchOutput() string {
	b, _ := os.ReadFile(r.batch)
	return string(b)
}

// all is the batch output and every node's, for a failure's log.
func (r *pyRun) all() string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- batch output (%s):\n%s", r.batch, r.batchOutput())
	for i, o := range r.outputs() {
		fmt.Fprintf(&b, "\n--- node %d:\n%s", i, o)
	}
	return b.String()
}

// waitOutput waits until the nodes' outputs together match re.
func (r *pyRun) waitOutput(ctx context.Context, t *testing.T, re *regexp.Regexp) {
	t.Helper()
	if !r.sawOutput(ctx, re) {
		t.Fatalf("job %s: no %q in the nodes' outputs: %v", r.id, re, ctx.Err())
	}
}

// sawOutput reports whether re matches the nodes' outputs before ctx ends.
func (r *pyRun) sawOutput(ctx context.Context, re *regexp.Regexp) bool {
	for !re.MatchString(strings.Join(r.outputs(), "\n")) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond): // polling with a deadline
		}
	}
	return true
}

// waitTraining waits until rank 0 has trained 3 steps.
func (r *pyRun) waitTraining(ctx context.Context, t *testing.T) {
	t.Helper()
	r.waitOutput(ctx, t, regexp.MustCompile(`\[default0\]:step 3 loss`))
}

// gone waits until the job has ended and returns its state and exit code
// (scontrol's ExitCode, "75:0": the batch script's status and signal).
func (r *pyRun) gone(ctx context.Context, t *testing.T) (state, exit string) {
	t.Helper()
	state, err := r.c.WaitJobGone(ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	return state, r.field(ctx, t, "ExitCode")
}

// field is one field of `scontrol show job` (the job is remembered for
// MinJobAge, 300 s, after its end).
func (r *pyRun) field(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	out, _, err := Output(r.c.Command(ctx, "scontrol", "-o", "show", "job", r.id))
	if err != nil {
		t.Fatal(err)
	}
	for f := range strings.FieldsSeq(out) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	t.Fatalf("scontrol show job %s: no %s= in %q", r.id, name, out)
	return ""
}

var (
	savedRe    = regexp.MustCompile(`preempted: saved step (\d+) to (\S+)`)
	stoppingRe = regexp.MustCompile(`rank (\d+) stopping at step (\d+)`)
	resumedRe  = regexp.MustCompile(`resumed at step (\d+)`)
	receivedRe = regexp.MustCompile(`gorun: warning: received (SIG\w+)`)
	requestRe  = regexp.MustCompile(`on the stop request \(([^)]*)\)`)
)

// checkSaved checks a stop request's end in outs (every node's output):
// every one of the ranks stopped after the same step, rank 0 saved it to
// ckpt (each rank's ckpt-rank<R>.pt is there) and every node's gorun
// stopped cleanly with 75. It returns the saved step (-1 if none).
func checkSaved(t *testing.T, outs []string, nodes, ranks int, ckpt string) int {
	t.Helper()
	all := strings.Join(outs, "\n")
	if len(outs) != nodes {
		t.Errorf("%d node outputs, want %d", len(outs), nodes)
	}
	for i, o := range outs {
		if !strings.Contains(o, "preempted cleanly") || !strings.Contains(o, "exiting 75") {
			t.Errorf("node %d's gorun did not stop cleanly with 75 (no \"preempted cleanly\" and \"exiting 75\")", i)
		}
	}
	steps := map[string]string{}
	for _, m := range stoppingRe.FindAllStringSubmatch(all, -1) {
		steps[m[1]] = m[2]
	}
	m := savedRe.FindStringSubmatch(all)
	if m == nil {
		t.Errorf("rank 0 saved no checkpoint (no %q)", savedRe)
		return -1
	}
	step, _ := strconv.Atoi(m[1])
	for r := range ranks {
		if got := steps[strconv.Itoa(r)]; got != m[1] {
			t.Errorf("rank %d stopped at step %q, rank 0 saved step %s: the ranks did not agree", r, got, m[1])
		}
		if _, err := os.Stat(filepath.Join(ckpt, fmt.Sprintf("ckpt-rank%d.pt", r))); err != nil {
			t.Errorf("rank %d's checkpoint: %v", r, err)
		}
	}
	if len(steps) != ranks {
		t.Errorf("%d ranks said they stopped (%v), want %d", len(steps), steps, ranks)
	}
	return step
}

// srunExited checks that srun reported each of nodes' task ending with
// code (srun's own line in the batch output).
func srunExited(t *testing.T, batch string, nodes []string, code int) {
	t.Helper()
	for _, n := range nodes {
		re := regexp.MustCompile(`srun: error: ` + regexp.QuoteMeta(n) + `: task \d+: Exited with exit code ` + strconv.Itoa(code) + `\n`)
		if !re.MatchString(batch) {
			t.Errorf("srun does not say that %s's gorun exited %d", n, code)
		}
	}
}

// signalsSeen says, node by node, which signals each node's gorun
// received and the stop request it ended on ("SIGTERM on host"), for
// the test's log.
func signalsSeen(outs []string) string {
	var b strings.Builder
	for i, o := range outs {
		var got []string
		for _, m := range receivedRe.FindAllStringSubmatch(o, -1) {
			got = append(got, m[1])
		}
		fmt.Fprintf(&b, "node %d received %v", i, got)
		if m := requestRe.FindStringSubmatch(o); m != nil {
			fmt.Fprintf(&b, " (request: %s)", m[1])
		}
		if i < len(outs)-1 {
			b.WriteString("; ")
		}
	}
	return b.String()
}

// firstRun is the part of a node's output (appended to by each run of a
// requeued job) that its first gorun wrote.
func firstRun(out string) string {
	const start = "gorun: slurm: "
	if i := strings.Index(out, start); i >= 0 {
		if j := strings.Index(out[i+len(start):], start); j >= 0 {
			return out[:i+len(start)+j]
		}
	}
	return out
}

// pyJob submits a batch script of nodes nodes that exports a fresh token
// and runs PyTorch workers under `srun --ntasks-per-node=1 gorun
// --nproc-per-node=2 train_ddp.py --steps 100000 --step-time 0.05
// --checkpoint $OUT/ckpt`, then prints srun's status; sbatchArgs go
// before the script. Each node's output is $OUT/node-<job>-<n>.out.
func pyJob(ctx context.Context, t *testing.T, c *Cluster, nodes int, sbatchArgs ...string) (r *pyRun, ckpt string) {
	t.Helper()
	out, err := os.MkdirTemp(c.Dir(), "py-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	ckpt = filepath.Join(out, "ckpt")
	script := fmt.Sprintf(`#!/bin/bash
#SBATCH -N %d
export GORUN_RDZV_TOKEN=%s
export PYTHON_EXEC=%s
srun --ntasks-per-node=1 --open-mode=append --output=%s/node-%%j-%%n.out %s/gorun --nproc-per-node=2 \
  %s/examples/pytorch/train_ddp.py --steps 100000 --step-time 0.05 --checkpoint %s
echo "srun exited $?"
`, nodes, Token(t), pyPython(), out, c.BinDir(), c.root, ckpt)
	path := filepath.Join(out, "job.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	batch := filepath.Join(out, "slurm-%j.out")
	args := append([]string{"--parsable", "--open-mode=append", "--output=" + batch}, sbatchArgs...)
	return pySbatch(t, c, pyCommand(ctx, c, "sbatch", append(args, path)...), batch, out), ckpt
}

// pyExample is a copy of the repository's examples/ folder in the
// cluster's folder, where examples/slurm/train.sbatch runs as a user runs
// it from the repository's root: its checkpoints/ folder lands in the
// copy, not in the repository.
type pyExample struct {
	c    *Cluster
	root string
}

func newPyExample(t *testing.T, c *Cluster) *pyExample {
	t.Helper()
	root, err := os.MkdirTemp(c.Dir(), "repo-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(c.root, "examples")
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(root, "examples", rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatalf("copy examples/: %v", err)
	}
	return &pyExample{c: c, root: root}
}

// script is the example's path as a user gives it to sbatch.
const exampleScript = "examples/slurm/train.sbatch"

// submit runs `sbatch --chdir=<copy> [sbatchArgs] examples/slurm/train.sbatch
// [trainArgs]` from the copy; srun's output goes to one file per node
// (SLURM_STDOUTMODE, srun's --output, from the environment: the script is
// the repository's, byte for byte).
func (e *pyExample) submit(ctx context.Context, t *testing.T, sbatchArgs, trainArgs []string) *pyRun {
	t.Helper()
	want, err := os.ReadFile(filepath.Join(e.c.root, exampleScript))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(e.root, exampleScript)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the copy of %s differs from the repository's (%v)", exampleScript, err)
	}
	args := append([]string{"--parsable", "--chdir=" + e.root}, sbatchArgs...)
	args = append(append(args, exampleScript), trainArgs...)
	cmd := pyCommand(ctx, e.c, "sbatch", args...)
	cmd.Dir = e.root
	cmd.Env = append(cmd.Env, "SLURM_STDOUTMODE="+filepath.Join(e.root, "node-%j-%n.out"))
	return pySbatch(t, e.c, cmd, filepath.Join(e.root, "slurm-%j.out"), e.root)
}
