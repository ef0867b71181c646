package main

import (
	"path/filepath"
	"strings"
	"testing"
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
