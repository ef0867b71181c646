package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// ddpExample is the PyTorch example, run unchanged.
var ddpExample, _ = filepath.Abs("../../examples/pytorch/train_ddp.py")

// torchExitAbort says whether a run failed only through a PyTorch 2.15
// bug: a worker that had finished its work aborted in C++ at its exit
// ("terminate called without an active exception", SIGABRT, exit 134).
// It happens under torchrun 2.15 too (1 in 16 FSDP jobs on a loaded
// 2-core machine; a probe saw it after sys.exit(3)); gorun reports it
// truthfully as the worker's failure.
func torchExitAbort(r result) bool {
	return r.code == 128+int(syscall.SIGABRT) && strings.Contains(r.stderr, "terminate called without an active exception")
}

// againIfTorchAborted runs the job once more where its run r failed only
// through torchExitAbort, saying so loudly; otherwise it returns r.
func againIfTorchAborted(t *testing.T, r result, run func() result) result {
	t.Helper()
	if !torchExitAbort(r) {
		return r
	}
	t.Logf("!!!!!!!! a worker aborted at its exit (PyTorch 2.15's bug, under torchrun too): running the job once more\n%s", r.stderr)
	return run()
}

func TestTorchDDPGloo(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	run := func() result {
		return runGorun(t, testEnv(), "--nproc-per-node=3", "--python", py, ddpExample, "--steps", "5")
	}
	r := againIfTorchAborted(t, run(), run)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"[default0]:rank 0/3", "[default1]:rank 1/3", "[default2]:rank 2/3", "backend gloo",
		"[default2]:step 4 loss", "[default0]:parameters identical on all 3 ranks: True"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestTorchRecordFailureRestartedAndReported(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	logDir := t.TempDir()
	r := runGorun(t, testEnv(), "--nproc-per-node=2", "--max-restarts=1", "--rdzv-id=rec", "--log-dir", logDir,
		"--python", py, ddpExample, "--steps", "4", "--fail-rank", "1", "--fail-always")
	if r.code != 1 {
		t.Fatalf("exit %d; want 1, the failed worker's code\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "[default1]:rank 1/2 local_rank 1 backend gloo attempt 1") {
		t.Errorf("the workers were not restarted:\n%s", r.stdout)
	}
	errFile := filepath.Join(runFolder(t, logDir, "rec"), "attempt_1", "1", "error.json")
	for _, want := range []string{"restart 1 of 1", "Root Cause", "rank      : 1 (local_rank: 1)",
		"message   : RuntimeError: deliberate failure on rank 1 at step 2", "error_file: " + errFile,
		`raise RuntimeError(f"deliberate failure on rank {rank} at step {step}")`} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stderr)
		}
	}
	if data, err := os.ReadFile(errFile); err != nil || !strings.Contains(string(data), "py_callstack") {
		t.Errorf("%s = %q, %v; want PyTorch's error JSON", errFile, data, err)
	}
}

// TestGPUDDPNCCL runs the same script over NCCL on every GPU; `make
// test-gpu` runs it on a machine with NVIDIA GPUs.
func TestGPUDDPNCCL(t *testing.T) {
	if os.Getenv("GORUN_TEST_GPU") != "1" {
		t.Skip("GPU test: run with GORUN_TEST_GPU=1 (make test-gpu) on a machine with NVIDIA GPUs")
	}
	py := torchPython(t)
	r := runGorun(t, testEnv(), "--nproc-per-node=gpu", "--python", py, ddpExample, "--steps", "20", "--backend", "nccl")
	if r.code != 0 || !strings.Contains(r.stdout, "backend nccl") || !strings.Contains(r.stdout, "parameters identical") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
