package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// TestGoodputOfAnUnchangedScript: a training loop that knows nothing of
// gorun (its probe counts the optimizer steps and sees torch.save) fails
// at step 25 after a checkpoint at step 20: the report measures its
// steps, charges the loss from the checkpoint, and says so; a run of the
// same script that succeeds has its startup apart from its training.
func TestGoodputOfAnUnchangedScript(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
		not  []string
	}{
		{"fails after a checkpoint", []string{"--fault", "raise", "--fault-rank", "1", "--fault-step", "25"}, 1,
			[]string{"checkpoint  ", "failed", "probe", "(step 20)"}, []string{"steps not measured"}},
		// Killed two steps after its checkpoint: no exit handler runs, and
		// the probe's snapshot (every second) must already hold the save.
		{"killed after a checkpoint", []string{"--fault", "kill", "--fault-rank", "0", "--fault-step", "21"}, 137,
			[]string{"checkpoint  ", "failed", "(step 20)"}, []string{"steps not measured"}},
		{"succeeds", []string{"--steps", "30"}, 0,
			[]string{"succeeded", "1-30", "probe"}, []string{"steps not measured", "failures"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logs, dir := t.TempDir(), t.TempDir()
			args := append([]string{"--nproc-per-node=2", "--log-dir", logs, "--python", py, faultScript, "--checkpoint", filepath.Join(dir, "ckpt.pt")}, tc.args...)
			r := runGorun(t, testEnv(), args...)
			if r.code != tc.code {
				t.Fatalf("exit %d; want %d\n%s", r.code, tc.code, r.stderr)
			}
			rep := runGorun(t, testEnv(), "report", logs)
			if rep.code != 0 {
				t.Fatalf("gorun report: exit %d\n%s", rep.code, rep.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(rep.stdout, w) {
					t.Errorf("report lacks %q", w)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(rep.stdout, w) || strings.Contains(r.stderr, w) {
					t.Errorf("report or summary has %q", w)
				}
			}
			if t.Failed() {
				t.Logf("report:\n%s\nstderr:\n%s", rep.stdout, r.stderr)
			}
		})
	}
}

// TestGoodputOfAStopThatDoesNotSave: SIGTERM to gorun while a script that
// knows nothing of gorun trains (it does not save on the stop request, and
// is ended): the steps since its last checkpoint are redone on resume, so
// the report counts them lost, since that checkpoint, not as teardown.
func TestGoodputOfAStopThatDoesNotSave(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	logs, dir := t.TempDir(), t.TempDir()
	ckpt := filepath.Join(dir, "ckpt.pt")
	cmd, stdout, stderr := startGorun(t, testEnv(), "--nproc-per-node=2", "--log-dir", logs, "--python", py, faultScript,
		"--steps", "100000", "--checkpoint", ckpt)
	proctest.WaitFor(t, "a checkpoint and steps after it", 2*time.Minute, func() bool {
		_, err := os.Stat(ckpt)
		return err == nil && strings.Contains(stdout.String(), "step 20 ")
	})
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, cmd); code != 143 {
		t.Fatalf("exit %d; want 143\n%s", code, stderr)
	}
	rep := runGorun(t, testEnv(), "report", logs)
	if rep.code != 0 {
		t.Fatalf("gorun report: exit %d\n%s", rep.code, rep.stderr)
	}
	row := regexp.MustCompile(`(?m)^0 +stopped +([0-9.]+) +checkpoint +\S+ +\S+ +workers ended by SIGTERM`)
	m := row.FindStringSubmatch(rep.stdout)
	if m == nil {
		t.Fatalf("the report charges no loss since the checkpoint to the stop:\n%s", rep.stdout)
	}
	if lost, _ := strconv.ParseFloat(m[1], 64); lost <= 0 {
		t.Errorf("lost %v s since the checkpoint; want more than 0", lost)
	}
	if !regexp.MustCompile(`(?m)^teardown +0\.000 `).MatchString(rep.stdout) {
		t.Errorf("the stop is filed as teardown:\n%s", rep.stdout)
	}
}
