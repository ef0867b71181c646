package comm

import (
	"os"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/workerenv"
)

// HeartbeatEnv names the file that gorun --hang-timeout watches besides a
// worker's output (workerenv.HeartbeatFile).
const HeartbeatEnv = workerenv.HeartbeatFile

// Heartbeat tells gorun that this worker makes progress, for workers that
// may stay silent longer than --hang-timeout: it touches the file named by
// GORUN_HEARTBEAT_FILE (nothing to do when gorun watches no heartbeat).
// Call it once per step or so; it costs one system call.
func Heartbeat() error {
	path := os.Getenv(HeartbeatEnv)
	if path == "" {
		return nil
	}
	now := time.Now()
	if err := os.Chtimes(path, now, now); err == nil {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}
