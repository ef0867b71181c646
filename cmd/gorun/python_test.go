package main

import (
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/gorun-dev/gorun/internal/testkit/torchpy"
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

// torchChoice is internal/testkit/torchpy's choice of interpreter, made
// once for the package: PyTorch 2.x, the reference, where its environment
// exists.
var torchChoice = sync.OnceValue(func() torchpy.Choice { return torchpy.Find("../..") })

// torchPython returns an interpreter that can import torch (PyTorch 2.x,
// the reference, where its environment exists: torchpy.Find), or skips
// the test loudly; with GORUN_REQUIRE_TORCH=1 (set by .ci/run) it fails
// instead.
func torchPython(t *testing.T) string {
	t.Helper()
	c := torchChoice()
	if c.Missing != "" {
		msg := "no PyTorch for the test: " + c.String()
		if os.Getenv("GORUN_REQUIRE_TORCH") == "1" {
			t.Fatal(msg)
		}
		t.Log("!!!!!!!! SKIPPING A PYTORCH TEST: " + msg)
		os.Stderr.WriteString("!!!!!!!! SKIPPING A PYTORCH TEST: " + msg + "\n")
		t.Skip(msg)
	}
	return c.Python
}
