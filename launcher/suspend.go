package launcher

import "syscall"

// suspend does what Ctrl-Z (SIGTSTP, which gorun catches) asks: it stops
// the running workers (SIGSTOP to each one's process group), then gorun
// itself, so that the shell that runs gorun gets its prompt back with the
// whole job stopped, as under torchrun, whose workers share its process
// group. When the shell continues gorun (fg, bg: SIGCONT), gorun continues
// the workers.
func suspend(workers []*worker) {
	for _, w := range workers {
		_ = w.proc.signalGroup(syscall.SIGSTOP)
	}
	_ = syscall.Kill(syscall.Getpid(), syscall.SIGSTOP) // returns once continued
	for _, w := range workers {
		_ = w.proc.signalGroup(syscall.SIGCONT)
	}
}
