package launcher

import (
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/workerenv"
)

// EnvHeartbeatFile names the file a worker may touch to show progress
// when gorun runs with --hang-timeout (comm.Heartbeat, or
// examples/pytorch/gorun_heartbeat.py).
const EnvHeartbeatFile = workerenv.HeartbeatFile

// evidenceGrace is how long a hung worker has to print its evidence and
// exit after the evidence signal, before SIGKILL.
const evidenceGrace = 5 * time.Second

// progress is a worker's last sign of life: a line of output (any
// stream) or a touch of its heartbeat file.
type progress struct {
	last      atomic.Int64 // unix nanoseconds of the last output
	heartbeat string       // the heartbeat file ("" without one)
}

func newProgress(heartbeat string, now time.Time) *progress {
	p := &progress{heartbeat: heartbeat}
	p.last.Store(now.UnixNano())
	return p
}

// saw records output at now.
func (p *progress) saw(now time.Time) { p.last.Store(now.UnixNano()) }

// latest is the later of the last output and the heartbeat file's
// modification time.
func (p *progress) latest() time.Time {
	t := time.Unix(0, p.last.Load())
	if p.heartbeat != "" {
		if fi, err := os.Stat(p.heartbeat); err == nil && fi.ModTime().After(t) {
			t = fi.ModTime()
		}
	}
	return t
}

// progressReader notes the time of every read that returns bytes.
type progressReader struct {
	r io.Reader
	p *progress
}

func (pr progressReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	if n > 0 {
		pr.p.saw(time.Now())
	}
	return n, err
}

// hangWatch finds workers without progress for timeout. check is called
// on a ticker by the attempt's monitor; each worker is reported once.
type hangWatch struct {
	timeout time.Duration
	workers []*progress
	flagged []bool
}

func newHangWatch(timeout time.Duration, workers []*progress) *hangWatch {
	return &hangWatch{timeout: timeout, workers: workers, flagged: make([]bool, len(workers))}
}

// interval is how often check should run: a tenth of the timeout, at
// least 10 ms and at most a second.
func (h *hangWatch) interval() time.Duration {
	return min(max(h.timeout/10, 10*time.Millisecond), time.Second)
}

// check returns the indexes of the workers that became hung by now.
func (h *hangWatch) check(now time.Time, running func(i int) bool) []int {
	var hung []int
	for i, p := range h.workers {
		if h.flagged[i] || !running(i) {
			continue
		}
		if now.Sub(p.latest()) > h.timeout {
			h.flagged[i] = true
			hung = append(hung, i)
		}
	}
	return hung
}

// evidenceSignal is the signal that makes a worker show where it is
// stuck: SIGABRT for Python (PYTHONFAULTHANDLER prints every thread's
// traceback), SIGQUIT for a Go program (the runtime prints every
// goroutine), none for other programs.
func evidenceSignal(e Entrypoint) syscall.Signal {
	if !e.NoPython || isPython(e.Script) {
		return syscall.SIGABRT
	}
	path := e.Script
	if !strings.ContainsRune(path, '/') {
		if p, err := exec.LookPath(path); err == nil {
			path = p
		}
	}
	if _, err := buildinfo.ReadFile(path); err == nil {
		return syscall.SIGQUIT
	}
	return 0
}

func isPython(script string) bool {
	base := filepath.Base(script)
	return strings.HasPrefix(base, "python") || strings.HasSuffix(base, ".py")
}

// hangTicker drives an attempt's hang checks (nil without --hang-timeout;
// its methods accept nil).
type hangTicker struct {
	watch  *hangWatch
	ticker *time.Ticker
	kills  []*time.Timer
}

func (att *attempt) hangTicker() *hangTicker {
	if att.cfg.HangTimeout <= 0 {
		return nil
	}
	ps := make([]*progress, len(att.workers))
	for i, w := range att.workers {
		ps[i] = w.progress
	}
	h := newHangWatch(att.cfg.HangTimeout, ps)
	return &hangTicker{watch: h, ticker: time.NewTicker(h.interval())}
}

func (h *hangTicker) tick() <-chan time.Time {
	if h == nil {
		return nil
	}
	return h.ticker.C
}

func (h *hangTicker) stop() {
	h.ticker.Stop()
	for _, t := range h.kills {
		t.Stop()
	}
}

// catchHangs signals each newly hung worker for evidence and arranges its
// SIGKILL after evidenceGrace (through kills, read by the monitor); a
// worker with no evidence to give gets SIGKILL at once. The worker's exit
// then fails the attempt as any failure does.
func (att *attempt) catchHangs(h *hangTicker, kills chan<- *worker) {
	cfg := att.cfg
	for _, i := range h.watch.check(time.Now(), func(i int) bool { return !att.workers[i].proc.Exited() }) {
		w := att.workers[i]
		sig := evidenceSignal(cfg.Entrypoint)
		w.hung = fmt.Sprintf("no output and no heartbeat for %v (--hang-timeout)", cfg.HangTimeout)
		if sig == 0 {
			// Stopped now, as the log says: given the evidence grace, one
			// that exited 0 meanwhile counted as done.
			cfg.Log.Errorf("local rank %d (rank %d, pid %d) hung: no output and no heartbeat for %v; stopping it",
				w.spec.LocalRank, w.spec.Rank, w.proc.Pid, cfg.HangTimeout)
			_ = w.proc.signalGroup(syscall.SIGKILL)
			continue
		}
		w.hung += fmt.Sprintf("; %s sent for its stacks, which are in its output above", SignalName(sig))
		cfg.Log.Errorf("local rank %d (rank %d, pid %d) hung: no output and no heartbeat for %v; sending %s to capture its stacks",
			w.spec.LocalRank, w.spec.Rank, w.proc.Pid, cfg.HangTimeout, SignalName(sig))
		_ = w.proc.signal(sig)
		h.kills = append(h.kills, time.AfterFunc(evidenceGrace, func() { kills <- w }))
	}
}
