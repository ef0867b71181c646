package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestLaunchOrCommand: a launch builds only the launch flags (no
// subcommands, no help categories), so gorun must place each command line
// exactly as the full command line would: every command listed by --help
// runs as that command, wherever the launch flags before it put it, and
// a script runs as a script, whatever its arguments say.
func TestLaunchOrCommand(t *testing.T) {
	t.Parallel()
	help := runGorun(t, testEnv(), "--help")
	section := help.stdout[strings.Index(help.stdout, "COMMANDS:"):]
	section = section[:strings.Index(section, "\n\n")]
	commands := regexp.MustCompile(`(?m)^   (\w+)`).FindAllStringSubmatch(section, -1)
	if len(commands) < 4 {
		t.Fatalf("--help lists %d commands:\n%s", len(commands), help.stdout)
	}
	for _, c := range commands {
		name := c[1]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, args := range [][]string{{name, "--help"}, {"--log-level", "info", name, "--help"}, {"--standalone", "--", name, "--help"}} {
				r := runGorun(t, testEnv(), args...)
				if r.code != 0 || !strings.Contains(r.stdout, "gorun "+name) {
					t.Errorf("gorun %q: exit %d, no help of the %s command\n%s%s", args, r.code, name, r.stdout, r.stderr)
				}
			}
		})
	}
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{[]string{"--nproc-per-node", "2", "--no-python", "/bin/echo", "plan", "--help"}, 0, "[default1]:plan --help"},
		{[]string{"--no-python", "-r", "0", "/bin/echo", "trace"}, 0, "[default0]:trace"},
		{[]string{"--no-python", "--max-restarts=0", "--", "/bin/echo", "bench"}, 0, "[default0]:bench"},
		{[]string{"--log-dir", dir, "trace", dir}, 1, "no flight recorder dumps"},
		{[]string{"--nproc-per-node=2"}, 2, "no training script given"},
		{[]string{"--no-such-flag", "x.py"}, 2, "flag provided but not defined"},
		{[]string{"-v"}, 0, "gorun version"},
	} {
		r := runGorun(t, testEnv(), c.args...)
		if out := r.stdout + r.stderr; r.code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("gorun %q: exit %d (want %d), want %q in\n%s", c.args, r.code, c.code, c.want, out)
		}
	}
}
