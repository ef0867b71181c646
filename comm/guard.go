package comm

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/watchdog"
)

// Environment variables of the watchdog (docs/watchdog.md).
const (
	// TimeoutEnv bounds each collective of a worker's groups, as a
	// duration (e.g. 30s, 10m), unless the program sets Options.Timeout.
	TimeoutEnv = "GORUN_COLLECTIVE_TIMEOUT"
	// DumpDirEnv is where the flight recorder is dumped; gorun sets it
	// under --log-dir.
	DumpDirEnv = workerenv.FlightRecorderDir
	// HeartbeatTimeoutEnv (seconds; PyTorch's
	// TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC is read too) bounds how long the
	// watchdog may make no progress before the process is ended.
	HeartbeatTimeoutEnv = "GORUN_HEARTBEAT_TIMEOUT_SEC"
)

// DefaultHeartbeatTimeout is ProcessGroupNCCL's watchdog-stuck threshold.
const DefaultHeartbeatTimeout = 8 * time.Minute

// guard is an Env's watchdog and what runs around it: the handler, the
// watch for other ranks' failures, the heartbeat monitor and the SIGUSR1
// dumper. Its goroutines end at stop.
type guard struct {
	dog     *watchdog.Watchdog
	handler *watchdog.Handler
	watch   *StoreClient // its own connection: a blocking Get
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	usr1    chan os.Signal
}

// timeoutFromEnv is TimeoutEnv's duration (0 when unset).
func timeoutFromEnv() (time.Duration, error) {
	v := os.Getenv(TimeoutEnv)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("comm: %s=%q: want a positive duration such as 30s or 10m", TimeoutEnv, v)
	}
	return d, nil
}

// heartbeatTimeoutFromEnv reads HeartbeatTimeoutEnv, then PyTorch's.
func heartbeatTimeoutFromEnv() (time.Duration, error) {
	for _, name := range []string{HeartbeatTimeoutEnv, "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"} {
		v := os.Getenv(name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("comm: %s=%q: want a number of seconds above 0", name, v)
		}
		return time.Duration(n) * time.Second, nil
	}
	return DefaultHeartbeatTimeout, nil
}

// dumpDir is DumpDirEnv (gorun sets it), else a folder per job in this
// user's private flight-recorder folder (private.FlightRecorderDir), made
// now: a worker started without gorun never writes where another user
// could have planted a folder or a link. A run id that is not a plain
// name is not used as a folder name.
func dumpDir() (string, error) {
	if d := os.Getenv(DumpDirEnv); d != "" {
		return d, nil
	}
	base, warning, err := private.FlightRecorderDir()
	if err != nil {
		return "", fmt.Errorf("comm: flight recorder folder: %w (set %s)", err, DumpDirEnv)
	}
	if warning != "" {
		fmt.Fprintf(os.Stderr, "gorun watchdog: %s\n", warning)
	}
	id := os.Getenv(workerenv.RunID)
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") {
		id = "job"
	}
	return filepath.Join(base, id), nil
}

// startGuard makes the watchdog of an Env with world l and starts its
// goroutines.
func startGuard(ctx context.Context, l Launch, signals *StoreClient) (*guard, error) {
	size, err := watchdog.BufferSizeFromEnv()
	if err != nil {
		return nil, err
	}
	mode, err := watchdog.ErrorHandlingFromEnv()
	if err != nil {
		return nil, err
	}
	beat, err := heartbeatTimeoutFromEnv()
	if err != nil {
		return nil, err
	}
	dumps, err := dumpDir()
	if err != nil {
		return nil, err
	}
	usr1Ignored, err := launcherIgnores(syscall.SIGUSR1)
	if err != nil {
		return nil, err
	}
	if err := sayGoneOnClose(ctx, signals, l.Rank); err != nil {
		return nil, err
	}
	watch, err := DialStore(ctx, l.StoreAddr, l.Secret)
	if err != nil {
		return nil, err
	}
	rec := watchdog.NewRecorder(size)
	g := &guard{watch: watch, usr1: make(chan os.Signal, 1)}
	g.handler = &watchdog.Handler{Rank: l.Rank, WorldSize: l.Size, Recorder: rec, DumpDir: dumps, Mode: mode,
		Signal: signals, Exit: os.Exit, Log: os.Stderr, WaitForDumps: true}
	g.dog = watchdog.New(watchdog.Config{Rank: l.Rank, Recorder: rec, OnFailure: g.handler.Handle})
	g.handler.Abort, g.handler.BeforeDump = g.dog.AbortAll, g.dog.Refresh
	run, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	// Where gorun starts the workers with SIGUSR1 ignored, the signal is
	// the job's stop request (Slurm's scancel --signal=USR1 reaches every
	// process of the step), not a request for a dump.
	if !usr1Ignored {
		signal.Notify(g.usr1, syscall.SIGUSR1)
	}
	g.go_(func() { g.dog.Run(run) })
	g.go_(func() { watchdog.WatchSignal(run, watch, g.handler) })
	if os.Getenv("TORCH_NCCL_ENABLE_MONITORING") != "0" {
		g.go_(func() { watchdog.MonitorHeartbeat(run, g.dog, beat, g.handler.Handle) })
	}
	g.go_(func() {
		for {
			select {
			case <-run.Done():
				return
			case <-g.usr1:
				if path, err := g.handler.DumpNow("SIGUSR1"); err != nil {
					fmt.Fprintf(os.Stderr, "gorun watchdog: %v\n", err)
				} else {
					fmt.Fprintf(os.Stderr, "gorun watchdog: flight recorder dumped to %s (SIGUSR1)\n", path)
				}
			}
		}
	})
	return g, nil
}

// sayGoneOnClose makes the store say rank is gone (watchdog.GoneValue
// under its DumpedKey) once signals's connection ends without a dump
// written: a killed process never keeps the other ranks waiting for its
// dump. signals is idle but for the group's set-up and a failure, so a
// killed process's end is seen at once.
func sayGoneOnClose(ctx context.Context, signals *StoreClient, rank int) error {
	return signals.CreateOnClose(ctx, watchdog.DumpedKey+strconv.Itoa(rank), watchdog.GoneValue)
}

func (g *guard) go_(fn func()) {
	g.wg.Add(1)
	go func() { defer g.wg.Done(); fn() }()
}

// stop ends the guard's goroutines and waits for them.
func (g *guard) stop() {
	signal.Stop(g.usr1)
	g.cancel()
	g.watch.Close() // ends the blocking Get
	g.wg.Wait()
}
