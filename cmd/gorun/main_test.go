package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/leakcheck"
)

// gorunBin is the gorun binary built for these tests.
var gorunBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gorun-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gorunBin = filepath.Join(dir, "gorun")
	build := exec.Command("go", "build", "-tags", "urfave_cli_no_docs", "-o", gorunBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build gorun:", err)
		os.Exit(1)
	}
	code := leakcheck.Main(m, 5*time.Second)
	os.RemoveAll(dir)
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
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PET_") || strings.HasPrefix(k, "GORUN_") || k == "OMP_NUM_THREADS" ||
			k == "PYTORCH_CUDA_ALLOC_CONF" || k == "MULTI_STREAM_MEMORY_REUSE" || k == "PYTHON_EXEC" || k == "LOGLEVEL" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

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
	err := cmd.Run()
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

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// processGone reports whether pid has exited (gone, or a zombie).
func processGone(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || strings.HasPrefix(s[i+1:], " Z") || strings.HasPrefix(s[i+1:], " X")
}

// pidsIn reads the pids listed (one per line) in the files matching glob.
func pidsIn(t *testing.T, glob string) []int {
	t.Helper()
	files, _ := filepath.Glob(glob)
	var pids []int
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, field := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(field); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// signalName is the shell's name of sig (TERM, INT, HUP).
func signalName(sig syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGINT: "INT", syscall.SIGHUP: "HUP"}[sig]
}
