package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/comm"
)

// killedPeerWorker all-reduces 16 MiB again and again; the last rank
// kills itself with SIGKILL while one of its all-reduces is in flight.
// The others must fail with an error, well within their 20 s timeout.
func killedPeerWorker() int {
	// Survive gorun's SIGTERM so that the error below is what ends
	// this worker (gorun would send SIGKILL after --stop-timeout).
	signal.Ignore(syscall.SIGTERM)
	return withWorkerEnv(20*time.Second, allReduceUntilKilled)
}

func allReduceUntilKilled(ctx context.Context, env *comm.Env) int {
	x, err := env.Allocator.Empty(16<<20, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	victim := env.Rank() == env.Size()-1
	for i := 0; ; i++ {
		w, err := env.AllReduce(x, comm.Float32, comm.Sum)
		if err == nil && victim && i == 3 {
			for !w.IsCompleted() {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
		if err == nil {
			err = w.Wait(ctx)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: collective %d failed: %v\n", env.Rank(), i, err)
			return 1
		}
	}
}

// TestKilledPeerMidCollective: real processes on the shared-memory
// transport; a rank killed mid-collective makes the others fail with an
// error (not a hang), and no shared-memory file outlives its process.
func TestKilledPeerMidCollective(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Error handling 0: the watchdog reports and dumps, and the error
	// reaches the program (the default ends the worker at once).
	r := runGorun(t, testEnv(commWorkerEnv+"=kill", "GORUN_ASYNC_ERROR_HANDLING=0"), "--nproc-per-node=3", "--no-python", self)
	took := time.Since(start)
	if r.code == 0 || !strings.Contains(r.stderr, "signal: killed") && !strings.Contains(r.stderr, "SIGKILL") {
		t.Errorf("exit %d; want the killed worker reported\n%s", r.code, r.stderr)
	}
	for _, rank := range []string{"0", "1"} {
		if !strings.Contains(r.stderr, "[default"+rank+"]:rank "+rank+": collective ") {
			t.Errorf("rank %s did not report its failed collective\n%s", rank, r.stderr)
		}
	}
	// Nobody waits for the 20 s collective timeout: a dead peer is seen
	// at once.
	if took > 15*time.Second {
		t.Errorf("the job took %v to end after a rank was killed", took)
	}
	for _, f := range orphanShm(t) {
		t.Errorf("shared-memory file %s outlived its process", f)
	}
}

// desyncWorker all-reduces 8 floats twice, except that rank 1's second
// all-reduce has 16: the ranks disagree at sequence number 1.
func desyncWorker() int {
	return withWorkerEnv(20*time.Second, allReduceTwice)
}

func allReduceTwice(ctx context.Context, env *comm.Env) int {
	for i := range 2 {
		n := int64(8)
		if i == 1 && env.Rank() == 1 {
			n = 16
		}
		x, err := env.Allocator.Empty(4*n, 0)
		if err == nil {
			err = comm.Sync(ctx)(env.AllReduce(x, comm.Float32, comm.Sum))
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: %v\n", env.Rank(), err)
			return 1
		}
	}
	return 0
}

// TestDesyncIsReported: ranks that call different collectives at one
// sequence number fail at once (the transport checks every message's
// length), and the flight recorder's verdict calls it a desync.
func TestDesyncIsReported(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Two ranks: the desync is found when both called the collective
	// (a third could be told to stop before it got there).
	r := runGorun(t, testEnv(commWorkerEnv+"=desync"), "--nproc-per-node=2", "--log-dir", t.TempDir(), "--no-python", self)
	want := "group 0: desync at collective #1: the ranks called different collectives: rank 0 all_reduce #1 [[8]] float32; rank 1 all_reduce #1 [[16]] float32"
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d; want the verdict %q\n%s", r.code, want, r.stderr)
	}
}

// orphanShm lists gorun's ring files in /dev/shm whose creating process
// (the pid in the name) is gone.
func orphanShm(t *testing.T) []string {
	matches, _ := filepath.Glob("/dev/shm/gorun-*")
	var out []string
	for _, m := range matches {
		parts := strings.Split(filepath.Base(m), "-")
		if len(parts) < 2 {
			continue
		}
		pid, err := strconv.Atoi(parts[1])
		if err != nil {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			out = append(out, m)
		}
	}
	return out
}
