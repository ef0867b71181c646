package cmdline

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompletion runs the completion scripts in their shells: bash
// completes flags in both spellings, the subcommands and files; zsh and
// tcsh read theirs without error (where installed; .ci/run does not
// install them, so they are skipped, loudly, on a machine without them).
func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	for _, shell := range []string{"bash", "zsh", "tcsh"} {
		var b strings.Builder
		if err := printCompletion(&b, shell, launchFlags()); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "gorun."+shell), []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "train.py"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	complete := func(t *testing.T, words ...string) string {
		t.Helper()
		script := `source ./gorun.bash; COMP_WORDS=(` + strings.Join(words, " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _gorun; echo "${COMPREPLY[*]}"`
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tt := range []struct {
		words []string
		want  string
	}{
		{[]string{"gorun", "--nproc"}, "--nproc-per-node --nproc_per_node"},
		{[]string{"gorun", "--virtual"}, "--virtual-local-rank --virtual_local_rank"},
		{[]string{"gorun", "--shutdown"}, "--shutdown-timeout --shutdown_timeout"},
		{[]string{"gorun", "pl"}, "plan"},
		{[]string{"gorun", "--nproc-per-node=2", "tra"}, "train.py"},
	} {
		if got := complete(t, tt.words...); got != tt.want {
			t.Errorf("completing %q: %q; want %q", tt.words, got, tt.want)
		}
	}
	for _, shell := range []string{"zsh", "tcsh"} {
		if _, err := exec.LookPath(shell); err != nil {
			t.Logf("!!!!!!!! %s is not installed: its completion script is not checked", shell)
			continue
		}
		arg := []string{"-n", "gorun.zsh"}
		if shell == "tcsh" {
			arg = []string{"-c", "source gorun.tcsh; complete gorun"}
		}
		cmd := exec.Command(shell, arg...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil || (shell == "tcsh" && !strings.Contains(string(out), "virtual-local-rank")) {
			t.Errorf("%s reads its script: %v: %s", shell, err, out)
		}
	}
	if err := printCompletion(&strings.Builder{}, "fish", launchFlags()); err == nil || !strings.Contains(err.Error(), "want bash, zsh or tcsh") {
		t.Errorf("fish: %v; want an error naming the shells", err)
	}
}
