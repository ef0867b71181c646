package launcher

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/proc"
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
// and process group (internal/sys/proc forks and reaps it).
type process struct {
	*proc.Process
	// inGorunsGroup: the process runs in gorun's own process group (it
	// holds gorun's terminal), so signals go to it alone, never to its
	// group, which is gorun's; its children are left to the job's cgroup.
	inGorunsGroup bool
}

// status is how the process ended; valid once Done is closed.
func (p *process) status() exitStatus { return statusOf(p.State()) }

// startProcess starts argv with env, stdout and stderr in a session (and
// process group) of its own, as torchrun starts its workers
// (start_new_session), with SIGKILL as its parent death signal. It
// returns at once; the start's outcome arrives on the returned channel,
// so that many workers can be started in parallel. When the process
// exits, it is sent on exited (which must have room: the agent sizes it
// to the worker count). A nice above 0 lowers its CPU priority.
func startProcess(argv, env []string, stdout, stderr *os.File, exited chan<- *process, nice int) (*process, <-chan error) {
	return startProcessIn(argv, env, procFiles{stdout: stdout, stderr: stderr}, exited, nice, -1, nil)
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
// whose directory is open as cgroupFD (-1: this process's own) and bound
// to cpus where not empty (--numa-binding). If the clone into the cgroup
// fails, the process is started outside it and p.CgroupErr says why.
func startProcessIn(argv, env []string, files procFiles, exited chan<- *process, nice, cgroupFD int, cpus []int) (*process, <-chan error) {
	command := func() *exec.Cmd {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		cmd.Stdout = files.stdout
		cmd.Stderr = files.stderr
		if files.stdin != nil {
			cmd.Stdin = files.stdin
		}
		cmd.ExtraFiles = files.extra
		return cmd
	}
	p := &process{inGorunsGroup: files.inGorunsGroup}
	var started <-chan error
	p.Process, started = proc.Start(command, proc.Options{
		// A session, not only a process group (proc.Options.Setsid says
		// why). The worker in gorun's own group keeps that window: it
		// stops with gorun on the same Ctrl-Z, and only a restart of it
		// in the instant of the key press can catch it.
		Setsid: !files.inGorunsGroup, Nice: nice, CgroupFD: cgroupFD, CPUs: cpus,
		Exited: func(*proc.Process) { exited <- p },
	})
	return p, started
}

// statusOf converts a reaped process's state, seen at at, to an
// exitStatus.
func statusOf(ps *os.ProcessState, at time.Time) exitStatus {
	st := exitStatus{At: at}
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
	if err := p.SignalGroup(sig); err != nil {
		return fmt.Errorf("send %s to process group %d: %w", SignalName(sig), p.Pid, err)
	}
	return nil
}

// signal sends sig to the process alone (not its group), unless it was
// reaped (its pid may have been reused).
func (p *process) signal(sig syscall.Signal) error {
	if err := p.Signal(sig); err != nil {
		return fmt.Errorf("send %s to process %d: %w", SignalName(sig), p.Pid, err)
	}
	return nil
}
