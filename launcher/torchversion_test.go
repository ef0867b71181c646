package launcher

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTorchMajor lays out interpreters and torch installations as
// Debian, a virtual environment, PYTHONPATH and the user's site-packages
// do, and checks which torch TorchMajor finds.
func TestTorchMajor(t *testing.T) {
	type file struct{ path, text string }
	torch := func(dir, version string) file {
		return file{filepath.Join(dir, "torch", "version.py"), "from typing import Optional\n__version__ = '" + version + "'\ndebug = False\n"}
	}
	tests := []struct {
		name    string
		python  string // relative to the test's root
		files   []file
		environ []string // $ROOT is the test's root
		want    int      // 0: not found
	}{
		{name: "Debian's dist-packages", python: "usr/bin/python3",
			files: []file{{"usr/bin/python3", "#!"}, torch("usr/lib/python3/dist-packages", "1.13.0a0+git7c98e70d")}, want: 1},
		{name: "a virtual environment", python: "venv/bin/python",
			files: []file{{"venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\n"}, {"venv/bin/python", "#!"},
				torch("venv/lib/python3.11/site-packages", "2.15.0+cu132")}, want: 2},
		{name: "a virtual environment hides the system's torch", python: "venv/bin/python",
			files: []file{{"venv/pyvenv.cfg", "include-system-site-packages = false\n"}, {"venv/bin/python", "#!"},
				torch("venv/lib/python3/dist-packages", "1.13.0")}, want: 0},
		{name: "PYTHONPATH comes first", python: "venv/bin/python", environ: []string{"PYTHONPATH=$ROOT/src:$ROOT/other"},
			files: []file{{"venv/pyvenv.cfg", ""}, {"venv/bin/python", "#!"}, torch("other", "1.12.1"),
				torch("venv/lib/python3.11/site-packages", "2.4.0")}, want: 1},
		{name: "the user's site-packages before the system's", python: "usr/bin/python3", environ: []string{"HOME=$ROOT/home"},
			files: []file{{"usr/bin/python3", "#!"}, torch("home/.local/lib/python3.11/site-packages", "2.1.0"),
				torch("usr/lib/python3/dist-packages", "1.13.0")}, want: 2},
		{name: "no torch", python: "usr/bin/python3", files: []file{{"usr/bin/python3", "#!"}}, want: 0},
		{name: "a version.py without a version", python: "usr/bin/python3",
			files: []file{{"usr/bin/python3", "#!"}, {"usr/lib/python3/dist-packages/torch/version.py", "garbage"}}, want: 0},
		{name: "no such interpreter", python: "nowhere/python3", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tt.files {
				p := filepath.Join(root, f.path)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(f.text), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var environ []string
			for _, kv := range tt.environ {
				environ = append(environ, os.Expand(kv, func(k string) string {
					if k == "ROOT" {
						return root
					}
					return "$" + k
				}))
			}
			major, ok := TorchMajor(filepath.Join(root, tt.python), environ)
			if ok != (tt.want != 0) || major != tt.want {
				t.Errorf("TorchMajor = %d, %v; want %d (0: not found)", major, ok, tt.want)
			}
		})
	}
}
