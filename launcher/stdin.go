package launcher

import (
	"os"
	"syscall"
	"unsafe"
)

// The workers' standard input is gorun's, as torchrun's workers inherit
// theirs: `echo data | gorun ... read.py` reads data, and a breakpoint()
// gets pdb on the terminal. Each worker runs in a process group of its
// own, and a process outside the terminal's foreground group that reads
// from it is stopped (SIGTTIN). So when the input is the terminal that
// gorun runs in the foreground of, local rank 0 gets it and runs in
// gorun's own process group, the foreground one, as torchrun's workers
// do: it reads the terminal, and Ctrl-C and Ctrl-Z reach gorun and it
// together (gorun stops the job on SIGINT; the shell gets its prompt back
// on SIGTSTP). The other workers read nothing (/dev/null). A gorun in the
// background gives no worker the terminal.

// stdinRoutes says what each worker reads: in for local rank 0 and, unless
// the input is a terminal, for every worker; inGorunsGroup when rank 0
// gets the terminal.
type stdinRoutes struct {
	in            *os.File
	terminal      bool
	inGorunsGroup bool
}

// stdinRoutesOf looks at in (nil: none).
func stdinRoutesOf(in *os.File) stdinRoutes {
	if in == nil {
		return stdinRoutes{}
	}
	pgrp, err := terminalForeground(in)
	if err != nil {
		return stdinRoutes{in: in} // not a terminal: a pipe, a file
	}
	if pgrp != syscall.Getpgrp() {
		return stdinRoutes{terminal: true} // gorun runs in the background
	}
	return stdinRoutes{in: in, terminal: true, inGorunsGroup: true}
}

// forRank is local rank lr's input and whether it runs in gorun's
// process group.
func (p stdinRoutes) forRank(lr int) (*os.File, bool) {
	if p.terminal && lr != 0 {
		return nil, false
	}
	return p.in, p.inGorunsGroup
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
