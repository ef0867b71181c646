package launcher

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// StartError is returned when a worker process cannot be started at all
// (the program is missing or not executable). Restarting cannot help, so
// the agent gives up at once.
type StartError struct {
	LocalRank int
	Argv0     string
	Err       error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("start worker local rank %d (%s): %v", e.LocalRank, e.Argv0, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// ExitCode returns the shell's code for the failure: 127 when the program
// was not found, 126 when it could not be executed.
func (e *StartError) ExitCode() int {
	if errors.Is(e.Err, exec.ErrNotFound) || errors.Is(e.Err, os.ErrNotExist) {
		return 127
	}
	return 126
}

// exitStatus is how a worker process ended.
type exitStatus struct {
	// Code is the exit code, or 128+signal for a process killed by a
	// signal, as a shell reports it.
	Code int
	// Signal is the signal that killed the process, 0 if it exited.
	Signal syscall.Signal
	// At is when the exit was seen.
	At time.Time
}

// process is one running worker process, the leader of its own session
// and process group. One goroutine, locked to the OS thread that forked
// the process, waits for it and then closes done.
type process struct {
	pid  int
	done chan struct{}
	// status is valid once done is closed.
	status exitStatus
	// cgroupErr, when set, is why the process could not be started in
	// the job's cgroup (it runs outside it).
	cgroupErr error
	// inGorunsGroup: the process runs in gorun's own process group (it
	// holds gorun's terminal), so signals go to it alone, never to its
	// group, which is gorun's; its children are left to the job's cgroup.
	inGorunsGroup bool
}

// startProcess starts argv with env, stdout and stderr in a session (and
// process group) of its own, as torchrun starts its workers
// (start_new_session), with SIGKILL as its parent death signal. It
// returns at once; the start's outcome arrives on the returned channel,
// so that many workers can be started in parallel. When the process exits, the waiting goroutine
// records the status, closes p.done and sends p on exited (which must have
// room: the agent sizes it to the worker count).
//
// A nice above 0 lowers the process's CPU priority: it is set on the
// forking thread, which the child inherits (Linux keeps a nice value per
// thread, so setting it on the child after the fork would miss the
// threads it already started).
func startProcess(argv, env []string, stdout, stderr *os.File, exited chan<- *process, nice int) (*process, <-chan error) {
	return startProcessIn(argv, env, procFiles{stdout: stdout, stderr: stderr}, exited, nice, -1)
}

// procFiles are a process's standard files (stdin nil: /dev/null) and
// extra ones;
// inGorunsGroup runs the process in gorun's own process group instead of
// a new one (the worker that holds gorun's terminal, stdin.go).
type procFiles struct {
	stdin, stdout, stderr *os.File
	inGorunsGroup         bool
	// extra are the process's files 3, 4, ...
	extra []*os.File
}

// startProcessIn is startProcess with the process cloned into the cgroup
// whose directory is open as cgroupFD (-1: this process's own). If the
// clone into the cgroup fails, the process is started outside it and
// p.cgroupErr says why.
func startProcessIn(argv, env []string, files procFiles, exited chan<- *process, nice, cgroupFD int) (*process, <-chan error) {
	command := func(cgroupFD int) *exec.Cmd {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		cmd.Stdout = files.stdout
		cmd.Stderr = files.stderr
		if files.stdin != nil {
			cmd.Stdin = files.stdin
		}
		cmd.ExtraFiles = files.extra
		cmd.SysProcAttr = &syscall.SysProcAttr{
			// A session, not only a process group: a Ctrl-Z at gorun's
			// terminal during the fork reaches the child before its exec
			// (the kernel gives the child the signals sent to the
			// parent's group while it forks), and a child that stops
			// there holds the forking thread in vfork, so gorun cannot
			// stop and the shell never gets its prompt back. The kernel
			// discards a terminal stop for a process group that has no
			// parent in its session, which a new session is.
			// The worker in gorun's own group keeps that window: it
			// stops with gorun on the same Ctrl-Z, and only a restart of
			// it in the instant of the key press can catch it.
			Setsid: !files.inGorunsGroup,
			// Delivered when the forking thread ends; the goroutine below
			// keeps that thread alive until the worker has exited.
			Pdeathsig: syscall.SIGKILL,
		}
		if cgroupFD >= 0 {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cgroupFD
		}
		return cmd
	}
	p := &process{done: make(chan struct{}), inGorunsGroup: files.inGorunsGroup}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, after the
		// worker has been reaped.
		runtime.LockOSThread()
		if nice > 0 {
			// This thread is the child's alone and ends with it.
			_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, nice)
		}
		cmd := command(cgroupFD)
		err := cmd.Start()
		if err != nil && cgroupFD >= 0 && !errors.Is(err, exec.ErrNotFound) && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrPermission) {
			p.cgroupErr = err
			cmd = command(-1)
			err = cmd.Start()
		}
		if err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait() // the state says everything an error would
		p.status = statusOf(cmd.ProcessState)
		close(p.done)
		exited <- p
	}()
	return p, started
}

// statusOf converts a reaped process's state to an exitStatus.
func statusOf(ps *os.ProcessState) exitStatus {
	st := exitStatus{At: time.Now()}
	if ps == nil {
		// Wait failed without a state; report it as a generic failure.
		st.Code = 1
		return st
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		st.Signal = ws.Signal()
		st.Code = 128 + int(st.Signal)
		return st
	}
	st.Code = ps.ExitCode()
	return st
}

// signalGroup sends sig to the process's whole group. A group with no
// process left is not an error.
func (p *process) signalGroup(sig syscall.Signal) error {
	if p.inGorunsGroup {
		return p.signal(sig)
	}
	err := syscall.Kill(-p.pid, sig)
	if err == nil || errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return fmt.Errorf("send %s to process group %d: %w", SignalName(sig), p.pid, err)
}

// signal sends sig to the process alone (not its group), unless it was
// reaped (its pid may have been reused).
func (p *process) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	if err := syscall.Kill(p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("send %s to process %d: %w", SignalName(sig), p.pid, err)
	}
	return nil
}

// exited reports whether the process has been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
