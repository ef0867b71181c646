package private

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseInheritedOnExec marks every descriptor above stderr close-on-exec:
// those this process inherited (a file or pipe the shell that started it
// had open) never reach a process it starts, which gets stdin, stdout,
// stderr and only the descriptors handed to it on purpose
// (exec.Cmd.ExtraFiles), as Python's subprocess does by default. The
// descriptors stay usable in this process. Go opens its own with
// close-on-exec already.
func CloseInheritedOnExec() error {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	// Kernels before 5.11: each descriptor in turn.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		unix.CloseOnExec(fd) // the listing's own descriptor, closed since, fails harmlessly
	}
	return nil
}
