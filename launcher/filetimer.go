package launcher

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/workerenv"
)

// torchrun's worker watchdog (torch.distributed.elastic.timer): with
// TORCHELASTIC_ENABLE_FILE_TIMER=1 the agent serves a named pipe, named to
// the workers in TORCHELASTIC_TIMER_FILE, where a worker's FileTimerClient
// writes one JSON line per request: a timer for a scope of its code
// ("expires(after=60, scope='step')") or its release (a negative
// expiration time). A worker whose timer expires gets the request's
// signal (SIGKILL by default).

// fileTimerTick is how often expirations are checked: torchrun's agent
// uses 0.1 s.
const fileTimerTick = 100 * time.Millisecond

// timerRequest is one line of the pipe (FileTimerRequest.to_json).
type timerRequest struct {
	Version    int     `json:"version"`
	Pid        int     `json:"pid"`
	Scope      string  `json:"scope_id"`
	Expiration float64 `json:"expiration_time"`
	Signal     int     `json:"signal"`
}

// fileTimer serves the pipe for one agent's workers.
type fileTimer struct {
	path    string
	made    bool // gorun made the path's name (removed at the end)
	pipe    *os.File
	log     func(format string, args ...any)
	stop    context.CancelFunc
	done    chan struct{} // closed when serve has ended
	readers sync.WaitGroup
}

// startFileTimer starts the watchdog where environ enables it, and
// returns the variable that names its pipe to the workers; nil, nil where
// it is off. The pipe is made private (0600): a timer's signal reaches
// only a process of the job (a descendant of this gorun), never another
// one of the user's. It serves until ctx ends or close is called, which
// the caller must do.
func startFileTimer(ctx context.Context, environ []string, log func(format string, args ...any)) (*fileTimer, []EnvVar, error) {
	if v, _ := lookupEnv(environ, workerenv.EnableFileTimer); v != "1" {
		return nil, nil, nil
	}
	ft := &fileTimer{log: log, done: make(chan struct{})}
	ft.path, _ = lookupEnv(environ, workerenv.TimerFile)
	if ft.path == "" {
		// A new name (torchrun: a UUID); mkfifo fails where it is taken.
		ft.path = filepath.Join(os.TempDir(), fmt.Sprintf("watchdog_timer_%d_%d", os.Getpid(), time.Now().UnixNano()))
	} else if st, err := os.Lstat(ft.path); err == nil {
		// torchrun removes whatever is there; gorun only an old pipe.
		if st.Mode()&fs.ModeNamedPipe == 0 {
			return nil, nil, fmt.Errorf("%s=%s names %s, not a named pipe: want a path where the worker watchdog's pipe can be made", workerenv.TimerFile, ft.path, kindOf(st.Mode()))
		}
		if err := os.Remove(ft.path); err != nil {
			return nil, nil, fmt.Errorf("%s=%s: %w", workerenv.TimerFile, ft.path, err)
		}
	}
	if err := syscall.Mkfifo(ft.path, 0o600); err != nil {
		return nil, nil, fmt.Errorf("%s: make the worker watchdog's pipe %s: %w", workerenv.EnableFileTimer, ft.path, err)
	}
	ft.made = true
	// Read and write: the open does not wait for a writer, and the pipe
	// never reads as ended between two workers' requests.
	pipe, err := os.OpenFile(ft.path, os.O_RDWR, 0)
	if err != nil {
		os.Remove(ft.path)
		return nil, nil, fmt.Errorf("%s: open %s: %w", workerenv.EnableFileTimer, ft.path, err)
	}
	ft.pipe = pipe
	requests := make(chan timerRequest)
	ctx, ft.stop = context.WithCancel(ctx)
	ft.readers.Go(func() { ft.read(requests) })
	go ft.serve(ctx, requests)
	return ft, []EnvVar{{workerenv.TimerFile, ft.path}}, nil
}

// maxTimerLine bounds a request: FileTimerClient sends at most PIPE_BUF
// (4 KiB); a longer line is skipped whole, and the pipe served on.
const maxTimerLine = 4 << 10

// read passes the pipe's requests on until the pipe is closed.
func (ft *fileTimer) read(requests chan<- timerRequest) {
	defer close(requests)
	br := bufio.NewReaderSize(ft.pipe, maxTimerLine)
	skipping := false // in the rest of an overlong line
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if !skipping {
				ft.log("%s: a line longer than %d bytes, not a timer request: ignored", workerenv.TimerFile, maxTimerLine)
			}
			skipping = true
			continue
		}
		if err != nil {
			return // the pipe is closed
		}
		if skipping {
			skipping = false
			continue
		}
		var req timerRequest
		if err := json.Unmarshal(line, &req); err != nil || req.Pid <= 0 {
			ft.log("%s: not a timer request, ignored: %.200q", workerenv.TimerFile, line)
			continue
		}
		select {
		case requests <- req:
		case <-ft.done: // serving ended; close closes the pipe next
			return
		}
	}
}

// serve keeps the timers and signals the workers whose timers expire,
// until ctx ends.
func (ft *fileTimer) serve(ctx context.Context, requests <-chan timerRequest) {
	defer close(ft.done)
	type key struct {
		pid   int
		scope string
	}
	timers := map[key]timerRequest{}
	tick := time.NewTicker(fileTimerTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case req, ok := <-requests:
			if !ok {
				return
			}
			if req.Expiration < 0 {
				delete(timers, key{req.Pid, req.Scope})
			} else {
				timers[key{req.Pid, req.Scope}] = req
			}
		case now := <-tick.C:
			deadline := float64(now.UnixNano()) / 1e9
			for k, t := range timers {
				if t.Expiration > deadline {
					continue
				}
				delete(timers, k)
				if t.Signal <= 0 {
					continue // torchrun: no signal, no reaping
				}
				if !jobProcess(t.Pid, os.Getpid()) {
					ft.log("%s: timer %q of pid %d expired, but pid %d is not a process of this job: not signalled", workerenv.TimerFile, t.Scope, t.Pid, t.Pid)
					continue
				}
				sig := syscall.Signal(t.Signal)
				ft.log("worker pid %d: its timer %q expired (torch.distributed.elastic.timer): sending %s", t.Pid, t.Scope, SignalName(sig))
				if err := syscall.Kill(t.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
					ft.log("worker pid %d: %s: %v", t.Pid, SignalName(sig), err)
				}
			}
		}
	}
}

// close ends serving and reading and removes the pipe.
func (ft *fileTimer) close() {
	if ft == nil {
		return
	}
	ft.stop()
	<-ft.done
	ft.pipe.Close() // ends read
	ft.readers.Wait()
	if ft.made {
		os.Remove(ft.path)
	}
}

// kindOf names a file's kind for a message.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a folder"
	}
	return "a " + m.Type().String() + " file"
}

// jobProcess says whether pid is a process of the job: a strict
// descendant of gorun (pid agent) under one of its workers, not gorun
// itself nor one of its helpers (the guardian, a store).
func jobProcess(pid, agent int) bool {
	child := 0 // the chain's process just below gorun
	for range 64 {
		if pid == agent {
			if child == 0 {
				return false // gorun itself
			}
			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/cmdline")
			return err == nil && !strings.Contains(string(cmdline), "\x00gorun-guardian\x00") && !strings.Contains(string(cmdline), "gorun-etcd")
		}
		if pid <= 1 {
			return false
		}
		child = pid
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// pid (comm) state ppid ...: comm may hold spaces and ')'.
		rest := string(data[strings.LastIndexByte(string(data), ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(f[1]); err != nil {
			return false
		}
	}
	return false
}
