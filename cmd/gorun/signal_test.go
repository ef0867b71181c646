package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// startGorun starts the gorun binary in its own process group (as a shell
// job would be) and returns it with its output buffers.
func startGorun(t *testing.T, env []string, args ...string) (*exec.Cmd, *proctest.Buffer, *proctest.Buffer) {
	t.Helper()
	return startCmd(t, exec.Command(gorunBin, args...), env)
}

// startCmd starts cmd with env in its own process group, its output in
// buffers, killed with its group if the test ends first.
func startCmd(t *testing.T, cmd *exec.Cmd, env []string) (*exec.Cmd, *proctest.Buffer, *proctest.Buffer) {
	t.Helper()
	cmd.Env = env
	stdout, stderr := &proctest.Buffer{}, &proctest.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Only if the test failed half-way: never leave gorun running.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	return cmd, stdout, stderr
}

// waitExit waits for cmd and returns its exit code (128+signal when
// killed by a signal).
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(time.Minute):
		// Its goroutines' stacks, for the failure's log (testEnv sets
		// GOTRACEBACK=all; gorun leaves SIGABRT to Go's runtime).
		_ = cmd.Process.Signal(syscall.SIGABRT)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		t.Fatal("gorun did not exit within a minute (SIGABRT: its stacks are in its stderr)")
		return -1
	}
}

// familyScript starts two grandchildren (one of them a grandchild's child),
// records every pid, reports readiness and waits; it records the signals
// it gets.
const familyScript = `trap 'echo TERM >> "$1/sig.$RANK"; exit 143' TERM
trap 'echo INT >> "$1/sig.$RANK"; exit 130' INT
trap 'echo USR1 >> "$1/sig.$RANK"' USR1
echo $$ >> "$1/pids.$RANK"
sleep 300 & echo $! >> "$1/pids.$RANK"
(trap '' TERM INT; sleep 300 & echo $! >> "$1/pids.$RANK"; wait) &
while [ "$(wc -l < "$1/pids.$RANK")" -lt 3 ]; do sleep 0.01; done
touch "$1/ready.$RANK"
while :; do sleep 0.05 & wait $!; done
`

func waitReady(t *testing.T, dir string, n int) []int {
	t.Helper()
	waitFor(t, "workers ready", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "ready.*"))
		return len(m) == n
	})
	return proctest.PIDs(t, filepath.Join(dir, "pids.*"))
}

func assertAllGone(t *testing.T, pids []int) {
	t.Helper()
	proctest.WaitGone(t, "every worker and descendant to end", 30*time.Second, pids)
}

func TestSignalsStopWorkersAndDescendants(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(signalName(sig), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			script := writeScript(t, familyScript)
			cmd, _, stderr := startGorun(t, testEnv(), "--nproc-per-node=2", "--stop-timeout=20s", "--no-python", script, dir)
			pids := waitReady(t, dir, 2)
			if len(pids) != 6 {
				t.Fatalf("pids %v; want 2 workers with 2 descendants each", pids)
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := waitExit(t, cmd); code != 128+int(sig) {
				t.Errorf("gorun exit %d; want %d\n%s", code, 128+int(sig), stderr)
			}
			assertAllGone(t, pids)
			// The workers got the signal gorun got (SIGHUP has no trap, so
			// it simply ends them).
			if sig != syscall.SIGHUP {
				for r := range 2 {
					got, _ := os.ReadFile(filepath.Join(dir, "sig."+strconv.Itoa(r)))
					if !strings.Contains(string(got), signalName(sig)) {
						t.Errorf("rank %d got %q; want SIG%s", r, got, signalName(sig))
					}
				}
			}
		})
	}
}

func TestSIGUSR1IsForwarded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, familyScript)
	cmd, _, _ := startGorun(t, testEnv(), "--nproc-per-node=2", "--no-python", script, dir)
	pids := waitReady(t, dir, 2)
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SIGUSR1 at both workers", func() bool {
		a, _ := os.ReadFile(filepath.Join(dir, "sig.0"))
		b, _ := os.ReadFile(filepath.Join(dir, "sig.1"))
		return strings.Contains(string(a), "USR1") && strings.Contains(string(b), "USR1")
	})
	// SIGUSR1 does not stop the job.
	if proctest.Gone(pids[0]) {
		t.Fatal("a worker ended after SIGUSR1")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, cmd); code != 143 {
		t.Errorf("exit %d; want 143", code)
	}
	assertAllGone(t, pids)
}

// TestKilledGorunTakesWorkersAlong: even SIGKILL, which gorun cannot
// handle, ends the workers (parent death signal).
func TestKilledGorunTakesWorkersAlong(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, `echo $$ > "$1/pid.$RANK"; touch "$1/ready.$RANK"; exec sleep 300`)
	cmd, _, _ := startGorun(t, testEnv(), "--nproc-per-node=2", "--no-python", script, dir)
	waitReady(t, dir, 2)
	pids := proctest.PIDs(t, filepath.Join(dir, "pid.*"))
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cmd)
	assertAllGone(t, pids)
}

func TestFailureRestartAndSummary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logDir := filepath.Join(dir, "logs")
	// Rank 2 fails once the others have printed, so every log has a line.
	script := writeScript(t, `echo "attempt $TORCHELASTIC_RESTART_COUNT"; echo "to stderr" >&2
touch "$1/printed.$TORCHELASTIC_RESTART_COUNT.$RANK"
if [ "$RANK" = 2 ]; then
  while [ ! -e "$1/printed.$TORCHELASTIC_RESTART_COUNT.0" ] || [ ! -e "$1/printed.$TORCHELASTIC_RESTART_COUNT.1" ]; do sleep 0.01; done
  exit 9
fi
exec sleep 300`)
	r := runGorun(t, testEnv(), "--nproc-per-node=3", "--max-restarts=2", "--log-dir", logDir, "--rdzv-id=j", "--tee=3", "--no-python", script, dir)
	if r.code != 9 {
		t.Fatalf("exit %d; want 9, the failed worker's code\n%s", r.code, r.stderr)
	}
	for _, a := range []string{"attempt 0", "attempt 1", "attempt 2"} {
		if !strings.Contains(r.stdout, "[default2]:"+a) {
			t.Errorf("stdout lacks %q", a)
		}
	}
	for _, want := range []string{"restart 1 of 2", "restart 2 of 2", "FAILED", "Root Cause", "rank      : 2 (local_rank: 2)",
		"exitcode  : 9", filepath.Join(runFolder(t, logDir, "j"), "attempt_2/2/stdout.log")} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	for a := range 3 {
		for lr := range 3 {
			p := filepath.Join(runFolder(t, logDir, "j"), "attempt_"+strconv.Itoa(a), strconv.Itoa(lr), "stderr.log")
			if b, err := os.ReadFile(p); err != nil || string(b) != "to stderr\n" {
				t.Errorf("%s = %q, %v", p, b, err)
			}
		}
	}
}

// TestNoTemporaryDirectoriesLeft: a run without --log-dir leaves nothing in
// the temporary directory.
func TestNoTemporaryDirectoriesLeft(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	script := writeScript(t, `exit 1`)
	r := runGorun(t, testEnv("TMPDIR="+tmp), "--nproc-per-node=2", "--max-restarts=1", "--no-python", script)
	if r.code != 1 {
		t.Fatalf("exit %d", r.code)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}
}

// TestStartErrorExitCode: a program that cannot be started is reported
// with the shell's code and not retried.
func TestStartErrorExitCode(t *testing.T) {
	t.Parallel()
	r := runGorun(t, testEnv(), "--max-restarts=3", "--no-python", filepath.Join(t.TempDir(), "missing"))
	if r.code != 127 || !strings.Contains(r.stderr, "missing") || strings.Contains(r.stderr, "restart") {
		t.Errorf("exit %d stderr %q; want 127 naming the program, no restart", r.code, r.stderr)
	}
}

// TestQuitOutsideSignalsToHandle: SIGQUIT (Ctrl-\) that --signals-to-handle
// leaves out still stops the job as a stop signal does, exit 131 and no
// worker left; not Go's default for it, a dump of every goroutine and
// exit 2 (a probe saw that).
func TestQuitOutsideSignalsToHandle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	worker := writeScript(t, `touch "$1/ready.$RANK"; exec sleep 60`+"\n")
	cmd, _, stderr := startGorun(t, testEnv(), "--nproc-per-node=2", "--signals-to-handle=SIGTERM", "--no-python", worker, dir)
	waitFor(t, "both workers", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "ready.*"))
		return len(m) == 2
	})
	if err := cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != 128+int(syscall.SIGQUIT) {
		t.Errorf("exit %d; want %d\n%s", code, 128+int(syscall.SIGQUIT), stderr)
	}
	if s := stderr.String(); !strings.Contains(s, "received SIGQUIT") || strings.Contains(s, "goroutine ") {
		t.Errorf("stderr does not say it stopped on SIGQUIT, or holds a goroutine dump:\n%s", s)
	}
}

// TestRunFolderAfterAFailure: what a failed run leaves in its --log-dir
// run folder is the run's own: its attempts and its timeline, not the
// plain-stop mark gorun made for the workers it stopped (a probe found
// stop.plain left behind).
func TestRunFolderAfterAFailure(t *testing.T) {
	t.Parallel()
	logDir := t.TempDir()
	worker := writeScript(t, `[ "$RANK" = 0 ] && exit 3; exec sleep 60`+"\n")
	r := runGorun(t, testEnv(), "--log-dir", logDir, "--rdzv-id=fail", "--nproc-per-node=2", "--no-python", worker)
	if r.code != 3 {
		t.Fatalf("exit %d; want 3\n%s", r.code, r.stderr)
	}
	entries, err := os.ReadDir(runFolder(t, logDir, "fail"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"attempt_0", "events.jsonl"}; !slices.Equal(names, want) {
		t.Errorf("run folder holds %q; want %q", names, want)
	}
}
