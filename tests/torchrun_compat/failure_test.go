package torchrun_compat

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// TestRestarts: a failed worker restarts the whole group, up to
// --max-restarts, with TORCHELASTIC_RESTART_COUNT counting the attempts.
func TestRestarts(t *testing.T) {
	t.Parallel()
	worker := script("compat_worker.py")

	// local_elastic_agent_test.test_rank_restart_after_failure: rank 1
	// kills itself (SIGKILL) on attempt 0; attempt 1 succeeds.
	t.Run("local_elastic_agent_test.test_rank_restart_after_failure", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			dir := t.TempDir()
			o := l.launch(t, job{args: []string{"--nproc-per-node=2", "--max-restarts=3"}, script: []string{worker, "failonce", dir}})
			if o.code != 0 {
				t.Errorf("exit %d; want 0\n%s", o.code, o)
			}
			reports := dumps(t, dir)
			if _, ok := reports["a0.r1.json"]; !ok {
				t.Errorf("rank 1 never ran attempt 0: %v", reports)
			}
			for _, r := range []string{"0", "1"} {
				report, ok := reports["a1.r"+r+".json"]
				if !ok || report["TORCHELASTIC_RESTART_COUNT"] != "1" || report["TORCHELASTIC_MAX_RESTARTS"] != "3" {
					t.Errorf("rank %s on attempt 1: %v (ran: %v); want TORCHELASTIC_RESTART_COUNT=1, TORCHELASTIC_MAX_RESTARTS=3\n%s", r, report, ok, o)
				}
			}
			if _, ok := reports["a2.r0.json"]; ok {
				t.Errorf("a third attempt ran after attempt 1 succeeded: %v", reports)
			}
		})
	})

	// local_elastic_agent_test.test_run_bipolar_function: odd ranks
	// always fail; with --max-restarts=2 the group runs 3 times, then the
	// job fails. torchrun exits 1, gorun with the worker's code (3); both
	// print the failure summary naming rank 1 and its exit code.
	t.Run("local_elastic_agent_test.test_run_bipolar_function", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			dir := t.TempDir()
			o := l.launch(t, job{args: []string{"--nproc-per-node=2", "--max-restarts=2"}, script: []string{worker, "bipolar", dir, "3"}})
			if want := l.failureCode(3); o.code != want {
				t.Errorf("exit %d; want %d\n%s", o.code, want, o)
			}
			reports := dumps(t, dir)
			for _, name := range []string{"a0.r1.json", "a1.r1.json", "a2.r1.json"} {
				if _, ok := reports[name]; !ok {
					t.Errorf("no %s: attempts that ran: %v", name, reports)
				}
			}
			if _, ok := reports["a3.r1.json"]; ok {
				t.Errorf("a 4th attempt ran with --max-restarts=2")
			}
			for _, want := range []string{"compat_worker.py FAILED", "rank      : 1 (local_rank: 1)", "exitcode  : 3"} {
				if !strings.Contains(o.stderr, want) {
					t.Errorf("the failure summary has no %q\n%s", want, o)
				}
			}
		})
	})
}

// TestErrorFile: local_elastic_agent_test.test_run_sad_function: the
// root cause's error file (written by @record) reaches the launcher's own
// TORCHELASTIC_ERROR_FILE, where torchrun's @record-decorated main copies
// it with message.errorCode set to the worker's exit code (docs/sources.md,
// torchrun: the error file), so a launcher under a launcher (a scheduler) reports the worker's
// error. The summary shows the worker's message.
func TestErrorFile(t *testing.T) {
	t.Parallel()
	t.Run("local_elastic_agent_test.test_run_sad_function", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			dir := t.TempDir()
			reply := filepath.Join(t.TempDir(), "error.json")
			o := l.launch(t, job{args: []string{"--nproc-per-node=2"}, env: []string{"TORCHELASTIC_ERROR_FILE=" + reply},
				script: []string{script("compat_worker.py"), "sad", dir}})
			if want := l.failureCode(1); o.code != want {
				t.Errorf("exit %d; want %d\n%s", o.code, want, o)
			}
			if f := dumps(t, dir)["a0.r1.json"]["TORCHELASTIC_ERROR_FILE"]; f == "" || f == reply {
				t.Errorf("rank 1's TORCHELASTIC_ERROR_FILE is %q; want one of its own, not the launcher's %q", f, reply)
			}
			if !strings.Contains(o.stderr, "RuntimeError: sad because i throw") {
				t.Errorf("the summary does not show the worker's error\n%s", o)
			}
			data, err := os.ReadFile(reply)
			if err != nil {
				t.Fatalf("the launcher's TORCHELASTIC_ERROR_FILE: %v\n%s", err, o)
			}
			var got struct {
				Message struct {
					Message   string `json:"message"`
					ErrorCode int    `json:"errorCode"`
					ExtraInfo struct {
						Timestamp string `json:"timestamp"`
					} `json:"extraInfo"`
				} `json:"message"`
			}
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatalf("the launcher's TORCHELASTIC_ERROR_FILE: %v: %s", err, data)
			}
			if m := got.Message; m.Message != "RuntimeError: sad because i throw" || m.ErrorCode != 1 || m.ExtraInfo.Timestamp == "" {
				t.Errorf("the launcher's TORCHELASTIC_ERROR_FILE holds %s; want the worker's message, its timestamp and errorCode 1", data)
			}
		})
	})
}

// startSleepers starts two workers that sleep until stopped and returns
// the launch and the workers' pids.
func startSleepers(t *testing.T, l launcher, args ...string) (*running, []int) {
	t.Helper()
	dir := t.TempDir()
	r := l.start(t, job{args: append([]string{"--nproc-per-node=2"}, args...), script: []string{script("compat_worker.py"), "sleep", dir}})
	proctest.WaitFor(t, "both workers to start", launchTimeout, func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "pid.*"))
		select {
		case <-r.done:
			t.Fatalf("the launch ended before its workers started\n%s", r.result)
		default:
		}
		return len(m) == 2
	})
	pids := proctest.PIDs(t, filepath.Join(dir, "pid.*"))
	if len(pids) != 2 {
		t.Fatalf("worker pids %v; want 2", pids)
	}
	return r, pids
}

// TestSignals: SIGTERM, SIGINT, SIGHUP or SIGQUIT to the launcher stops
// its workers (launcher/api_test.test_rdzv_handler_shutdown_on_agent_signal:
// the agent's SignalException; docs/sources.md, torchrun: signals; 2.x's
// multiprocessing test_no_zombie_process_binary for all four, the
// default --signals-to-handle). torchrun
// exits 1 (the uncaught SignalException), gorun 128+signal
// (docs/launcher.md: the workers, stopped by SIGTERM, did not save and
// exit 0, so no clean preemption's 75).
func TestSignals(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run(fmt.Sprintf("launcher.api_test.test_rdzv_handler_shutdown_on_agent_signal(%s)", sigName(sig)), func(t *testing.T) {
			t.Parallel()
			both(t, func(t *testing.T, l launcher) {
				if sig == syscall.SIGHUP || sig == syscall.SIGQUIT {
					torch2Only(t, l)
				}
				r, pids := startSleepers(t, l)
				if err := r.cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				o := r.wait(t)
				want := 128 + int(sig)
				if l == torchrun {
					want = 1
				}
				if o.code != want {
					t.Errorf("exit %d after %s; want %d\n%s", o.code, sigName(sig), want, o)
				}
				proctest.WaitGone(t, "the workers to end", time.Minute, pids)
			})
		})
	}
	// multiprocessing test_api's signals tests, from the command line:
	// with --signals-to-handle=SIGTERM,SIGUSR1, SIGUSR1 to the launcher
	// reaches the workers (their default action ends them) and stops the
	// job.
	t.Run("multiprocessing.test_api(--signals-to-handle=SIGTERM,SIGUSR1)", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			torch2Only(t, l)
			r, pids := startSleepers(t, l, "--signals-to-handle=SIGTERM,SIGUSR1")
			if err := r.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			o := r.wait(t)
			want := 128 + int(syscall.SIGUSR1)
			if l == torchrun {
				want = 1
			}
			if o.code != want {
				t.Errorf("exit %d after SIGUSR1; want %d\n%s", o.code, want, o)
			}
			proctest.WaitGone(t, "the workers to end", time.Minute, pids)
		})
	})
}

// TestNoOrphans: a launcher killed with SIGKILL leaves no worker behind
// with gorun (docs/launcher.md). torchrun has no parent-death handling and
// leaves its workers running (docs/sources.md, torchrun: signals): recorded, not failed;
// the test then ends them itself. No upstream test.
func TestNoOrphans(t *testing.T) {
	t.Parallel()
	t.Run("torchrun_doc.agent_SIGKILL_leaves_no_orphans", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			r, pids := startSleepers(t, l)
			r.cmd.Process.Kill()
			if o := r.wait(t); o.code != 137 {
				t.Errorf("exit %d after SIGKILL; want 137", o.code)
			}
			if l == gorun {
				proctest.WaitGone(t, "the workers of the killed gorun to end", 30*time.Second, pids)
				return
			}
			deadline := time.Now().Add(time.Second)
			for time.Now().Before(deadline) && !allGone(pids) {
				time.Sleep(50 * time.Millisecond)
			}
			var orphans []int
			for _, pid := range pids {
				if !proctest.Gone(pid) && isWorker(pid) {
					orphans = append(orphans, pid)
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			t.Logf("torchrun, SIGKILLed, left %d of its %d workers running (orphans %v; ended by the test)", len(orphans), len(pids), orphans)
		})
	})
}

func allGone(pids []int) bool {
	for _, pid := range pids {
		if !proctest.Gone(pid) {
			return false
		}
	}
	return true
}

// isWorker says whether pid is still one of this test's sleeping workers
// (not a pid reused by another process).
func isWorker(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && strings.Contains(string(data), "compat_worker.py")
}

func sigName(sig syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP", syscall.SIGQUIT: "SIGQUIT"}[sig]
}
