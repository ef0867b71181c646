package launcher

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/workerenv"
)

// TestFileTimer serves torchrun's worker watchdog pipe to real processes
// (children of the test, as workers are gorun's): a timer that expires
// gets its process the request's signal; a released one, or one without
// a signal, does not; a pid outside the job is never signalled.
func TestFileTimer(t *testing.T) {
	var mu sync.Mutex
	var logged []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(format, args...))
	}
	path := filepath.Join(t.TempDir(), "timer")
	ft, env, err := startFileTimer(context.Background(), []string{workerenv.EnableFileTimer + "=1", workerenv.TimerFile + "=" + path}, logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(env) != 1 || env[0] != (EnvVar{workerenv.TimerFile, path}) {
		t.Fatalf("env %v; want %s=%s", env, workerenv.TimerFile, path)
	}
	if st, err := os.Stat(path); err != nil || st.Mode()&os.ModeNamedPipe == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("the pipe: %v %v; want a private named pipe", st, err)
	}
	start := func() *exec.Cmd {
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	expired, released, silent := start(), start(), start()
	send := func(pid int, scope string, after float64, sig int) {
		t.Helper()
		exp := float64(time.Now().UnixNano())/1e9 + after
		if after < 0 {
			exp = -1
		}
		// As FileTimerClient: open, one line, close.
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, `{"version": 1, "pid": %d, "scope_id": %q, "expiration_time": %f, "signal": %d}`+"\n", pid, scope, exp, sig)
		f.Close()
	}
	// The others' deadlines come first: once the expired worker is
	// signalled, the server has dealt with theirs.
	send(released.Process.Pid, "step", 0.1, int(syscall.SIGKILL))
	send(released.Process.Pid, "step", -1, 0)
	send(silent.Process.Pid, "io", 0.1, 0)
	send(1, "init's", 0.1, int(syscall.SIGKILL))            // not the job's
	send(os.Getpid(), "gorun's", 0.1, int(syscall.SIGCONT)) // gorun itself: never
	// A line longer than any request is skipped whole; the pipe is
	// served on.
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(strings.Repeat("x", 70000) + "\n")
	f.Close()
	send(expired.Process.Pid, "step", 0.3, int(syscall.SIGKILL))
	done := make(chan error, 1)
	go func() { done <- expired.Wait() }()
	select {
	case err := <-done:
		if ws := expired.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the expired worker ended %v; want SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the expired worker was not signalled in 10 s")
	}
	for name, c := range map[string]*exec.Cmd{"released": released, "without a signal": silent} {
		if err := c.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("the worker whose timer was %s: %v; want it running", name, err)
		}
	}
	ft.close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the pipe is still there after close: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(logged, "\n")
	for _, want := range []string{fmt.Sprintf("worker pid %d: its timer \"step\" expired", expired.Process.Pid), "pid 1 is not a process of this job: not signalled",
		fmt.Sprintf("pid %d is not a process of this job", os.Getpid()), "a line longer than 4096 bytes"} {
		if !strings.Contains(all, want) {
			t.Errorf("log lacks %q:\n%s", want, all)
		}
	}
}

func TestFileTimerOffAndRefused(t *testing.T) {
	if ft, env, err := startFileTimer(context.Background(), nil, t.Logf); ft != nil || env != nil || err != nil {
		t.Errorf("without %s: %v %v %v; want nothing", workerenv.EnableFileTimer, ft, env, err)
	}
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := startFileTimer(context.Background(), []string{workerenv.EnableFileTimer + "=1", workerenv.TimerFile + "=" + file}, t.Logf)
	if err == nil || !strings.Contains(err.Error(), "not a named pipe") {
		t.Errorf("a regular file as the pipe: %v; want a refusal", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "mine" {
		t.Errorf("the user's file was touched: %q", b)
	}
}
