package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/leakcheck"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// gorunBin is the gorun binary built for these tests.
var gorunBin string

func TestMain(m *testing.M) {
	if os.Getenv(storeWorkerEnv) == "1" {
		os.Exit(storeWorker())
	}
	switch os.Getenv(commWorkerEnv) {
	case "1":
		os.Exit(commWorker())
	case "kill":
		os.Exit(killedPeerWorker())
	case "desync":
		os.Exit(desyncWorker())
	}
	// gorun and its companion gorun-etcd, side by side as make build
	// leaves them, and the Go DDP example.
	bin, remove, err := proctest.BuildGorun("../..", "examples/ddp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gorunBin, ddpBin = bin, filepath.Join(filepath.Dir(bin), "ddp")
	code := leakcheck.Main(m, 5*time.Second)
	remove()
	os.Exit(code)
}

// result is one finished gorun run.
type result struct {
	stdout, stderr string
	code           int
}

// testEnv is the environment of gorun in tests: the test's own, without
// variables that would change gorun's defaults.
func testEnv(extra ...string) []string {
	// Every test job shares this token: nodes of a multi-node test job
	// must hold the same one (docs/security.md).
	// GOTRACEBACK=all: a gorun that hangs is ended with SIGABRT, which
	// then prints every goroutine's stack (waitExit).
	env := append(proctest.GorunEnv(), "GORUN_RDZV_TOKEN="+testToken, "GOTRACEBACK=all")
	return append(env, extra...)
}

// testToken is the job token of the tests' multi-node jobs.
const testToken = "gorun-test-token-0123456789abcdef"

// runGorun runs the gorun binary to completion.
func runGorun(t *testing.T, env []string, args ...string) result {
	t.Helper()
	r, err := execGorun(env, args...)
	if err != nil {
		t.Fatalf("gorun %q: %v", args, err)
	}
	return r
}

// execGorun runs the gorun binary to completion; unlike runGorun it may be
// called from any goroutine.
func execGorun(env []string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gorunBin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return runResult(cmd.Run(), &stdout, &stderr)
}

// runResult is the result of a gorun run that ended with err (from
// Run or Wait): its exit code, or err itself if it did not run.
func runResult(err error, stdout, stderr *bytes.Buffer) (result, error) {
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		return result{}, err
	}
	return result{stdout.String(), stderr.String(), code}, nil
}

// writeScript writes an executable shell script and returns its path.
func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "worker.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// writePython writes a Python script, train.py, into dir and returns its
// path.
func writePython(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "train.py")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// linesWithPrefix returns the stdout lines of local rank r without the
// prefix, in order.
func linesWithPrefix(out, prefix string) []string {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			got = append(got, rest)
		}
	}
	return got
}

// waitFor polls cond until it holds or 30 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	proctest.WaitFor(t, what, 30*time.Second, cond)
}

// waitForTorch waits for cond on PyTorch workers' progress: their start
// (import torch, gloo's set-up) takes much longer than 30 s on 2 cores
// that the rest of the suite keeps busy.
func waitForTorch(t *testing.T, what string, cond func() bool) {
	t.Helper()
	proctest.WaitFor(t, what, 2*time.Minute, cond)
}

// signalName is the shell's name of sig (TERM, INT, HUP).
func signalName(sig syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGINT: "INT", syscall.SIGHUP: "HUP"}[sig]
}

// runFolder is the folder of run runID in logDir, <run_id>_<random> as
// torchrun names it, once it exists (one run of that id in logDir).
func runFolder(t *testing.T, logDir, runID string) string {
	t.Helper()
	var run string
	waitFor(t, "the run folder of "+runID+" in "+logDir, func() bool {
		m, _ := filepath.Glob(filepath.Join(logDir, runID+"_*"))
		if len(m) == 1 {
			run = m[0]
		}
		return run != ""
	})
	return run
}
