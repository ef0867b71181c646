package main

import (
	"os"
	"os/exec"
	"testing"
)

// testPython returns a Python 3 interpreter for the tests: GORUN_TEST_PYTHON,
// else Debian's /usr/bin/python3, else python3 on PATH.
func testPython(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("GORUN_TEST_PYTHON"), "/usr/bin/python3"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("SKIPPED: no python3 on this machine")
	}
	return p
}

// torchPython returns an interpreter that can import torch, or skips the
// test loudly; with GORUN_REQUIRE_TORCH=1 (set by .ci/run) it fails instead.
func torchPython(t *testing.T) string {
	t.Helper()
	py := testPython(t)
	if err := exec.Command(py, "-c", "import torch.distributed").Run(); err != nil {
		msg := "PyTorch is not importable from " + py + " (install Debian's python3-torch): " + err.Error()
		if os.Getenv("GORUN_REQUIRE_TORCH") == "1" {
			t.Fatal(msg)
		}
		t.Log("!!!!!!!! SKIPPING A PYTORCH TEST: " + msg)
		os.Stderr.WriteString("!!!!!!!! SKIPPING A PYTORCH TEST: " + msg + "\n")
		t.Skip(msg)
	}
	return py
}
