package launcher

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

// The workers' standard input is gorun's, as torchrun's workers inherit
// theirs: `echo data | gorun ... read.py` reads data, and a breakpoint()
// gets pdb on the terminal. Each worker runs in a process group of its
// own, and a process outside the terminal's foreground group that reads
// from it is stopped (SIGTTIN): so when the input is the terminal that
// gorun runs in the foreground of, local rank 0 gets it, its group made
// the foreground one while it runs (Ctrl-C then reaches that worker, as
// it reaches a script run without a launcher), and gorun takes the
// terminal back when the attempt ends; the other workers read nothing
// (/dev/null). A gorun in the background gives no worker the terminal.

// stdinPlan says what each worker reads: in for local rank 0 and, unless
// the input is a terminal, for every worker; foreground when rank 0 gets
// the terminal.
type stdinPlan struct {
	in         *os.File
	terminal   bool
	foreground bool
}

// planStdin looks at in (nil: none).
func planStdin(in *os.File) stdinPlan {
	if in == nil {
		return stdinPlan{}
	}
	pgrp, err := terminalForeground(in)
	if err != nil {
		return stdinPlan{in: in} // not a terminal: a pipe, a file
	}
	if pgrp != syscall.Getpgrp() {
		return stdinPlan{terminal: true} // gorun runs in the background
	}
	return stdinPlan{in: in, terminal: true, foreground: true}
}

// forRank is local rank lr's input and whether its group takes the
// terminal.
func (p stdinPlan) forRank(lr int) (*os.File, bool) {
	if p.terminal && lr != 0 {
		return nil, false
	}
	return p.in, p.foreground
}

// holdsTerminal says whether local rank lr holds the terminal: Ctrl-C
// reaches it alone, and its death by SIGINT is the user's interrupt.
func (p stdinPlan) holdsTerminal(lr int) bool { return p.foreground && lr == 0 }

// reclaim makes gorun's process group the terminal's foreground again
// after a worker held it. A process outside the foreground group that
// sets it gets SIGTTOU, ignored for the call.
func (p stdinPlan) reclaim() {
	if !p.foreground {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	pgrp := int32(syscall.Getpgrp())
	_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, p.in.Fd(), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&pgrp)))
}

// terminalForeground is the foreground process group of the terminal f
// is; an error when f is not a terminal.
func terminalForeground(f *os.File) (int, error) {
	var pgrp int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp))); errno != 0 {
		return 0, errno
	}
	return int(pgrp), nil
}
