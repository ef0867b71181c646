package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/timing"
)

// TestHangTimeoutPythonTraceback: a PyTorch gloo job with rank 1 stuck in
// a Python function, the script unchanged: with --hang-timeout gorun sees
// no rank move, asks every rank's probe for its stacks and flight
// recorder, and names rank 1, the function and its line, without a
// signal. The script prints while it imports torch and meets the others
// (seconds on 2 busy cores).
func TestHangTimeoutPythonTraceback(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	script, _ := filepath.Abs("testdata/hang_gloo.py")
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	// The line rank 1 is stuck on: the sleep in stuck_in_data_loading.
	line := 0
	for i, l := range strings.Split(string(src), "\n") {
		if strings.TrimSpace(l) == "time.sleep(0.05)" {
			line = i + 1
		}
	}
	hang := timing.PythonStart(t)
	start := time.Now()
	r := runGorun(t, testEnv(), "--nproc-per-node=3", "--hang-timeout", hang.String(), "--python", py, script)
	took := time.Since(start)
	if r.code != 124 {
		t.Fatalf("exit %d; want 124 (hung)\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"hang: no rank showed a sign of life for " + hang.String() + " (--hang-timeout)",
		fmt.Sprintf("rank 1 is outside any collective, at %s:%d in stuck_in_data_loading", script, line),
		"Root Cause (the rank that held the others up)", "rank      : 1 (local_rank: 1)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q\n%s", want, r.stderr)
		}
	}
	// Caught, not left to the test's own timeout: the start (imports and
	// rendezvous, however loaded the machine), the timeout, and a little.
	if took > hang+90*time.Second {
		t.Errorf("the hung job ended after %v", took)
	}
}

// TestHangTimeoutGoGoroutines: Go workers get SIGQUIT, and the runtime's
// goroutine dump lands in the output.
func TestHangTimeoutGoGoroutines(t *testing.T) {
	t.Parallel()
	r := runGorun(t, testEnv(), "--nproc-per-node=2", "--hang-timeout", "2s", "--no-python", ddpBin,
		"--steps", "1000", "--hang-rank", "1", "--hang-step", "1", "--collective-timeout", "5m")
	if r.code != 124 || !strings.Contains(r.stderr, "sending SIGQUIT") || !strings.Contains(r.stderr, "[default1]:goroutine 1 ") ||
		!strings.Contains(r.stderr, "main.train(") {
		t.Errorf("exit %d; want a goroutine dump of rank 1 naming main.train\n%s", r.code, r.stderr)
	}
}

// TestHangTimeoutStopsAShellWorkerAtOnce: a worker with no evidence to
// give (neither Python nor Go) is stopped when it is judged hung, not
// evidence grace (5 s) later: this one would otherwise have ended with
// exit 0, and the hung job counted as done.
func TestHangTimeoutStopsAShellWorkerAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, `sleep 4; touch "$1/woke"`)
	r := runGorun(t, testEnv(), "--hang-timeout", "1s", "--no-python", script, dir)
	if r.code != 124 || !strings.Contains(r.stderr, "hang: no rank showed a sign of life for 1s") || !strings.Contains(r.stderr, "gorun has no probe into these workers") {
		t.Errorf("exit %d; want the hung worker stopped and the job failed\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "woke")); err == nil {
		t.Errorf("the hung worker ran on after it was judged hung:\n%s", r.stderr)
	}
}

// TestHeartbeatKeepsASilentWorkerAlive: a worker that prints nothing but
// touches GORUN_HEARTBEAT_FILE every 0.1 s is not hung. It stays silent
// for twice the timeout (timing.QuietWorker: a busy 2-core machine
// stalled a 500-ms timeout's workers).
func TestHeartbeatKeepsASilentWorkerAlive(t *testing.T) {
	t.Parallel()
	timeout := timing.QuietWorker(t)
	beats := int(2 * timeout / (100 * time.Millisecond))
	script := writeScript(t, fmt.Sprintf(`i=0
while [ $i -lt %d ]; do touch "$GORUN_HEARTBEAT_FILE"; sleep 0.1; i=$((i+1)); done
`, beats))
	r := runGorun(t, testEnv(), "--nproc-per-node=2", "--hang-timeout", timeout.String(), "--no-python", script)
	if r.code != 0 || strings.Contains(r.stderr, "hung") {
		t.Errorf("exit %d\n%s", r.code, r.stderr)
	}
	bad := runGorun(t, testEnv(), "--hang-timeout", "soon", "--no-python", script)
	if bad.code != 2 || !strings.Contains(bad.stderr, "hang-timeout") {
		t.Errorf("--hang-timeout soon: exit %d\n%s", bad.code, bad.stderr)
	}
}

// TestHangTimeoutSparesAHealthyGoJob: ranks 1 and 2 of bin/ddp never
// print; they were once judged hung and killed mid-run. The job, not a
// worker, is judged now: rank 0 moves, so nobody is hung.
func TestHangTimeoutSparesAHealthyGoJob(t *testing.T) {
	t.Parallel()
	r := runGorun(t, testEnv(), "--nproc-per-node=3", "--hang-timeout", "1s", "--no-python", ddpBin, "--steps", "150", "--step-time", "20ms")
	if r.code != 0 || strings.Contains(r.stderr, "hang:") || !strings.Contains(r.stdout, "[default0]:final loss=") {
		t.Errorf("exit %d; want a finished job\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
