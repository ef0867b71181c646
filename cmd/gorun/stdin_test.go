package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestWorkersReadStdin: the workers read gorun's standard input, as
// torchrun's do (`echo hello | torchrun ... readstdin.py`).
func TestWorkersReadStdin(t *testing.T) {
	t.Parallel()
	script := writeScript(t, `read x; echo "rank $RANK read [$x]"`)
	cmd := exec.Command(gorunBin, "--nproc-per-node=1", "--no-python", script)
	cmd.Env = testEnv()
	cmd.Stdin = strings.NewReader("hello\n")
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "rank 0 read [hello]") {
		t.Errorf("gorun with hello on stdin: %v\n%s", err, out)
	}
}

// TestWorkerGetsTheTerminal: on a terminal that gorun runs in the
// foreground of, local rank 0 reads it (a breakpoint() gets pdb there)
// instead of being stopped by SIGTTIN for reading from the background,
// and gorun has the terminal back when the workers end.
func TestWorkerGetsTheTerminal(t *testing.T) {
	t.Parallel()
	script := writeScript(t, `echo "rank $RANK ready"; read x; echo "rank $RANK read [$x]"`)
	master, wait, done, seen := onTerminal(t, script)
	wait("rank 0 ready")
	wait("rank 1 read []") // the other workers read nothing
	if _, err := io.WriteString(master, "hello\n"); err != nil {
		t.Fatal(err)
	}
	wait("rank 0 read [hello]")
	if code := done(); code != 0 {
		t.Errorf("gorun exit %d\n%s", code, seen())
	}
}

// TestCtrlCOnTheTerminalStopsTheJob: Ctrl-C on the terminal reaches the
// worker that holds it; its death by SIGINT stops the whole job as
// gorun's own SIGINT does (exit 130, no restart).
func TestCtrlCOnTheTerminalStopsTheJob(t *testing.T) {
	t.Parallel()
	script := writeScript(t, `echo "rank $RANK ready attempt $TORCHELASTIC_RESTART_COUNT"; if [ "$RANK" = 0 ]; then read x; else sleep 60 & wait; fi`)
	master, wait, done, seen := onTerminal(t, script, "--max-restarts=2")
	wait("rank 0 ready attempt 0")
	wait("rank 1 ready attempt 0")
	if _, err := io.WriteString(master, "\x03"); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	if code := done(); code != 130 || strings.Contains(seen(), "attempt 1") {
		t.Errorf("gorun exit %d; want 130 and no restart\n%s", code, seen())
	}
}

// onTerminal runs gorun with script as two workers on a new
// pseudo-terminal, in its own session with the terminal as its
// controlling one (gorun in its foreground group, as a shell runs it).
// wait waits for a text on the terminal; done waits for gorun's exit code;
// seen is what the terminal showed.
func onTerminal(t *testing.T, script string, flags ...string) (master *os.File, wait func(string), done func() int, seen func() string) {
	t.Helper()
	master, slave, err := openPty()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	cmd := exec.Command(gorunBin, append(append([]string{"--nproc-per-node=2"}, flags...), "--no-python", script)...)
	cmd.Env = testEnv()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// Its own session, with the terminal as its controlling one: gorun is
	// in the terminal's foreground group, as when a shell runs it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	lines := make(chan string, 100)
	go func() {
		r := bufio.NewReader(master)
		for {
			l, err := r.ReadString('\n')
			if l != "" {
				lines <- l
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	var out strings.Builder
	wait = func(want string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for !strings.Contains(out.String(), want) {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("terminal closed before %q:\n%s", want, out.String())
				}
				out.WriteString(l)
			case <-deadline:
				_ = cmd.Process.Kill()
				t.Fatalf("no %q on the terminal within 30s:\n%s", want, out.String())
			}
		}
	}
	done = func() int {
		t.Helper()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("gorun did not end:\n%s", out.String())
		}
		return cmd.ProcessState.ExitCode()
	}
	return master, wait, done, out.String
}

// openPty opens a new pseudo-terminal pair.
func openPty() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var unlock int32
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		master.Close()
		return nil, nil, errno
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		master.Close()
		return nil, nil, errno
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// TestConsoleGoneIsNotFatal: `gorun ... | head -n 2` closes gorun's
// stdout early; gorun does not die of SIGPIPE but runs the job to its end
// and exits with its code (it used to exit 141 at once, leaving its
// clean-up to the next gorun's sweep).
func TestConsoleGoneIsNotFatal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, `for i in $(seq 500); do echo "line $i"; done
while [ ! -e "$1/closed" ]; do sleep 0.01; done
echo "after the reader left"; touch "$1/done"; exit 3`)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gorunBin, "--nproc-per-node=1", "--no-python", script, dir)
	cmd.Env = testEnv()
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	buf := make([]byte, 64)
	if _, err := r.Read(buf); err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader leaves, as head does
	if err := os.WriteFile(filepath.Join(dir, "closed"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != 3 {
		t.Errorf("gorun exit %d; want the worker's 3, not death by SIGPIPE (141)", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "done")); err != nil {
		t.Errorf("the worker did not run to its end: %v", err)
	}
}
