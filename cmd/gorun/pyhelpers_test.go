package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPythonHelpersImportable: a script alone in a folder of its own
// imports gorun_preempt and gorun_heartbeat with nothing copied or
// installed, with the probe on or off, as a script or with --no-python
// python; the modules are those of this gorun, byte for byte.
func TestPythonHelpersImportable(t *testing.T) {
	t.Parallel()
	py := testPython(t)
	dir := t.TempDir()
	body := `import gorun_preempt, gorun_heartbeat, os, sys
for m in (gorun_preempt, gorun_heartbeat):
    print(os.path.basename(m.__file__), len(open(m.__file__, "rb").read()))
print("alone:", os.listdir(os.path.dirname(os.path.abspath(sys.argv[0]))))
`
	script := writePython(t, dir, body)
	var want []string
	for _, m := range []string{"gorun_preempt.py", "gorun_heartbeat.py"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "launcher", "pyhelpers", m))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, m+" "+strconv.Itoa(len(b)))
	}
	for _, args := range [][]string{
		{"--python", py, script},
		{"--python", py, "--worker-probe=off", script},
		{"--no-python", py, script},
	} {
		r := runGorun(t, testEnv(), append([]string{"--nproc-per-node=2"}, args...)...)
		if r.code != 0 {
			t.Errorf("%v: exit %d\n%s", args, r.code, r.stderr)
			continue
		}
		for _, w := range append(want, "alone: ['train.py']") {
			if strings.Count(r.stdout, w) != 2 {
				t.Errorf("%v: want %q from both ranks; stdout:\n%s", args, w, r.stdout)
			}
		}
	}
}
