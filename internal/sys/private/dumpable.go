package private

import (
	"fmt"
	"syscall"
)

// HideSecrets makes this process undumpable: its /proc files that hold
// secrets (environ, mem) become root's alone, and no process of the same
// user may trace it. gorun's workers run as gorun's user; without this, a
// worker reads the job token and the store passwords from
// /proc/<gorun>/environ, whatever gorun leaves out of the workers' own
// environment. The workers are not affected: a program run by execve is
// dumpable again. Core dumps of this process are off.
func HideSecrets() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return fmt.Errorf("hide this process's secrets from its workers (prctl PR_SET_DUMPABLE): %w", errno)
	}
	return nil
}
