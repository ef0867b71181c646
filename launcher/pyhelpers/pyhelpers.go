// Package pyhelpers holds the Python modules gorun puts on the path of
// every Python worker it starts, so that a script imports them with no
// file to copy and nothing to install, at the version of the gorun that
// runs it:
//
//   - gorun_preempt: every rank stops at the same step when gorun asks
//     the job to stop (preemption), to save a checkpoint and exit 0;
//   - gorun_heartbeat: a worker that stays silent longer than
//     --hang-timeout tells gorun it makes progress.
//
// Both do nothing without gorun, but a script that must also run under
// torchrun imports them in a try block (examples/pytorch/train_ddp.py).
package pyhelpers

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
)

//go:embed gorun_preempt.py
var preempt []byte

//go:embed gorun_heartbeat.py
var heartbeat []byte

// Modules are the file names Install writes.
var Modules = [...]string{"gorun_preempt.py", "gorun_heartbeat.py"}

// Install writes the modules into folder, which the caller made private
// (0700, its own), and which goes first on the workers' PYTHONPATH.
func Install(folder string) error {
	for i, b := range [][]byte{preempt, heartbeat} {
		path := filepath.Join(folder, Modules[i])
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			return fmt.Errorf("python helpers: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("python helpers: %w", err)
		}
	}
	return nil
}
