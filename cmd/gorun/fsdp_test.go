package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// fsdpExample is the FSDP2 + DCP example, run unchanged.
var fsdpExample, _ = filepath.Abs("../../examples/pytorch/train_fsdp.py")

// fsdpFinal reads rank 0's "final loss=L checksum=C world=W" line.
func fsdpFinal(t *testing.T, r result) (loss, checksum float64, world int) {
	t.Helper()
	lines := linesWithPrefix(r.stdout, "[default0]:final loss=")
	if r.code != 0 || len(lines) != 1 {
		t.Fatalf("exit %d, final lines %q; want 0 and one\nstdout:\n%s\nstderr:\n%s", r.code, lines, r.stdout, r.stderr)
	}
	if _, err := fmt.Sscanf(lines[0], "%g checksum=%g world=%d", &loss, &checksum, &world); err != nil {
		t.Fatalf("final line %q: %v", lines[0], err)
	}
	return loss, checksum, world
}

// TestTorchFSDP runs examples/pytorch/train_fsdp.py (FSDP2's fully_shard
// over gloo, torch.distributed.checkpoint) under gorun as a 2.x user
// would, and checks that a job that is restarted, or preempted and
// resumed at another world size, ends where an uninterrupted job ends:
//   - a rank fails at step 6 (checkpoints every 4 steps), --max-restarts=1
//     with --warm-start: the restart resumes from step 4 in the warm
//     interpreters;
//   - 3 workers, SIGTERM to gorun: every rank saves after the same step and
//     gorun exits 75; the job relaunched on 2 workers reshards the
//     checkpoint and goes on.
func TestTorchFSDP(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	train := func(nproc int, extra ...string) []string {
		return append([]string{"--nproc-per-node=" + strconv.Itoa(nproc), "--python", py, fsdpExample, "--steps", "16"}, extra...)
	}
	ref := func() result { return runGorun(t, testEnv(), train(2)...) }
	wantLoss, wantSum, _ := fsdpFinal(t, againIfTorchAborted(t, ref(), ref))
	same := func(t *testing.T, r result, world int) {
		t.Helper()
		loss, sum, w := fsdpFinal(t, r)
		// The data and the gradients are the same at any world size
		// dividing the global batch, up to rounding.
		if w != world || math.Abs(loss-wantLoss) > 2e-5 || math.Abs(sum-wantSum) > 2e-3 {
			t.Errorf("ends loss=%v checksum=%v world=%d; the uninterrupted run loss=%v checksum=%v, want world=%d", loss, sum, w, wantLoss, wantSum, world)
		}
	}
	// Sequential: they share the 2 CPUs of small CI machines.
	t.Run("restart", func(t *testing.T) {
		ckpt := filepath.Join(t.TempDir(), "ckpt")
		run := func() result {
			os.RemoveAll(ckpt)
			return runGorun(t, testEnv(), append([]string{"--max-restarts=1", "--warm-start", "--log-level=debug"},
				train(2, "--checkpoint", ckpt, "--save-every", "4", "--fail-rank", "1", "--fail-step", "6")...)...)
		}
		r := againIfTorchAborted(t, run(), run)
		for _, want := range []string{"RuntimeError: deliberate failure on rank 1 at step 6", "[default0]:world 2 attempt 1 resumed at step 4"} {
			if !strings.Contains(r.stdout+r.stderr, want) {
				t.Errorf("output lacks %q\nstdout:\n%s\nstderr:\n%s", want, r.stdout, r.stderr)
			}
		}
		if !strings.Contains(r.stderr, "warm start in pid") {
			t.Errorf("the restart did not run in the warm interpreters:\n%s", r.stderr)
		}
		same(t, r, 2)
	})
	t.Run("preempted at 3 workers, resumed at 2", func(t *testing.T) {
		ckpt := filepath.Join(t.TempDir(), "ckpt")
		cmd, stdout, stderr := startGorun(t, testEnv(), train(3, "--checkpoint", ckpt, "--step-time", "0.2")...)
		waitForTorch(t, "a few steps", func() bool { return strings.Contains(stdout.String(), "[default0]:step 2 loss ") })
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := waitExit(t, cmd); code != preemptExit {
			t.Fatalf("gorun exit %d; want %d (preempted cleanly)\nstdout:\n%s\nstderr:\n%s", code, preemptExit, stdout, stderr)
		}
		saved := linesWithPrefix(stdout.String(), "[default0]:preempted: saved step ")
		if len(saved) != 1 {
			t.Fatalf("no checkpoint saved:\n%s", stdout)
		}
		next, _, _ := strings.Cut(saved[0], " ")
		run := func() result { return runGorun(t, testEnv(), train(2, "--checkpoint", ckpt)...) }
		r := againIfTorchAborted(t, run(), run)
		if want := "[default0]:world 2 attempt 0 resumed at step " + next + "\n"; !strings.Contains(r.stdout, want) {
			t.Errorf("the resumed run lacks %q:\n%s", want, r.stdout)
		}
		same(t, r, 2)
	})
}
