package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
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
	master, slave, err := openPty()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer master.Close()
	script := writeScript(t, `echo "rank $RANK ready"; read x; echo "rank $RANK read [$x]"`)
	cmd := exec.Command(gorunBin, "--nproc-per-node=2", "--no-python", script)
	cmd.Env = testEnv()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// Its own session, with the terminal as its controlling one: gorun is
	// in the terminal's foreground group, as when a shell runs it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
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
	var seen strings.Builder
	wait := func(want string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for !strings.Contains(seen.String(), want) {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("terminal closed before %q:\n%s", want, seen.String())
				}
				seen.WriteString(l)
			case <-deadline:
				_ = cmd.Process.Kill()
				t.Fatalf("no %q on the terminal within 30s:\n%s", want, seen.String())
			}
		}
	}
	wait("rank 0 ready")
	wait("rank 1 read []") // the other workers read nothing
	if _, err := io.WriteString(master, "hello\n"); err != nil {
		t.Fatal(err)
	}
	wait("rank 0 read [hello]")
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("gorun: %v\n%s", err, seen.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("gorun did not end after its workers:\n%s", seen.String())
	}
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
