// Package proc starts the child processes that must die with gorun (the
// launcher's workers, its local store, a store member): each is forked
// by an OS thread that stays locked until the child has been reaped, with
// SIGKILL as its parent-death signal, so a gorun killed outright (SIGKILL,
// the OOM killer) takes them with it.
package proc

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options say how a process is started.
type Options struct {
	// Setsid starts the process in a session (and process group) of its
	// own. A Ctrl-Z at gorun's terminal during the fork reaches the child
	// before its exec (the kernel gives the child the signals sent to the
	// parent's group while it forks), and a child that stops there holds
	// the forking thread in vfork, so gorun cannot stop and the shell
	// never gets its prompt back. The kernel discards a terminal stop for
	// a process group that has no parent in its session, which a new
	// session is.
	Setsid bool
	// Nice above 0 lowers the process's CPU priority. It is set on the
	// forking thread, which the child inherits: Linux keeps a nice value
	// per thread, so setting it on the child after the fork would miss
	// the threads the child already started.
	Nice int
	// CgroupFD, when above 0, is an open cgroup directory the process is
	// cloned into (0, standard input, is never one: the zero value means
	// none). If that clone fails for a reason other than the program
	// itself, the process is started outside it and Process.CgroupErr
	// says why.
	CgroupFD int
	// CPUs, when not empty, binds the process to these CPUs (its
	// affinity, as numactl --physcpubind): set on the forking thread,
	// which the child inherits from its first instruction, so no thread
	// it starts escapes it. A binding the kernel refuses fails the start.
	CPUs []int
	// Exited, when set, is called once the process has been reaped (after
	// Done is closed).
	Exited func(*Process)
}

// Process is a started process.
type Process struct {
	// Pid is the process's id; it is set before the start is reported.
	Pid int
	// CgroupErr, when set, is why the process runs outside the cgroup
	// Options.CgroupFD named.
	CgroupErr error

	done     chan struct{}
	state    *os.ProcessState
	exitedAt time.Time
}

// Start starts the command that command builds (called again, for a
// fresh command, when a clone into the cgroup fails) and returns at once:
// the start's outcome arrives on the returned channel, so that many
// processes can be started in parallel. The SysProcAttr is Start's own.
// A goroutine locked to the forking thread waits for the process; the
// thread ends with it, after the process has been reaped.
func Start(command func() *exec.Cmd, o Options) (*Process, <-chan error) {
	p := &Process{done: make(chan struct{})}
	started := make(chan error, 1)
	build := func(cgroupFD int) *exec.Cmd {
		cmd := command()
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Setsid: o.Setsid,
			// Delivered when the forking thread ends; the goroutine below
			// keeps that thread alive until the process has exited.
			Pdeathsig: syscall.SIGKILL,
		}
		if cgroupFD > 0 {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cgroupFD
		}
		return cmd
	}
	go func() {
		// Never unlocked: the thread ends with this goroutine, after the
		// process has been reaped.
		runtime.LockOSThread()
		if o.Nice > 0 {
			// This thread is the child's alone and ends with it.
			_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, o.Nice)
		}
		if len(o.CPUs) > 0 {
			if err := setThreadAffinity(o.CPUs); err != nil {
				started <- err
				return
			}
		}
		cmd := build(o.CgroupFD)
		err := cmd.Start()
		if err != nil && o.CgroupFD > 0 && !errors.Is(err, exec.ErrNotFound) && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrPermission) {
			p.CgroupErr = err
			cmd = build(-1)
			err = cmd.Start()
		}
		if err != nil {
			started <- err
			return
		}
		p.Pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait() // the state says everything an error would
		p.state, p.exitedAt = cmd.ProcessState, time.Now()
		close(p.done)
		if o.Exited != nil {
			o.Exited(p)
		}
	}()
	return p, started
}

// Done is closed once the process has been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has been reaped.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Ended reports whether the process has ended: reaped (Exited), or
// dead and not reaped yet (a zombie), whose reaping, a moment away, it
// waits for, so that State is known once it says true. A process killed
// just now is not taken for a live one.
func (p *Process) Ended() bool {
	if p.Exited() {
		return true
	}
	if !zombie(p.Pid) {
		return false
	}
	<-p.done
	return true
}

// zombie reports whether pid has ended and waits to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && strings.HasPrefix(s[i+1:], " Z")
}

// State is how the process ended and when that was seen; valid once Done
// is closed (a nil state: Wait failed without one).
func (p *Process) State() (*os.ProcessState, time.Time) { return p.state, p.exitedAt }

// Signal sends sig to the process alone, unless it has been reaped (its
// pid may have been reused). A process that is already gone is not an
// error; other errors are kill(2)'s, for the caller to phrase.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return nil
	}
	if err := syscall.Kill(p.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// SignalGroup sends sig to the process group the process leads (started
// with Setsid). A group with no process left is not an error; other
// errors are kill(2)'s, for the caller to phrase.
func (p *Process) SignalGroup(sig syscall.Signal) error {
	if err := syscall.Kill(-p.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}
