package launcher

import (
	"debug/buildinfo"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/gorun-dev/gorun/internal/sys/proc"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher/probe"
)

// evidenceGrace is how long a hung worker has to print its evidence and
// exit after the evidence signal, before SIGKILL.
const evidenceGrace = 5 * time.Second

// computing is the share of a second of CPU time a worker must use to
// count as computing: a rank that waits in a collective uses about none
// (gloo: 15 ms in 4 s, measured), one that runs its model uses most.
const computing = 0.1

// lifeSigns is a worker's last line of output (any stream) or touch of its
// heartbeat file.
type lifeSigns struct {
	last      atomic.Int64 // unix nanoseconds of the last output
	heartbeat string       // the heartbeat file ("" without one)
}

func newLifeSigns(heartbeat string, now time.Time) *lifeSigns {
	p := &lifeSigns{heartbeat: heartbeat}
	p.last.Store(now.UnixNano())
	return p
}

// saw records output at now.
func (p *lifeSigns) saw(now time.Time) { p.last.Store(now.UnixNano()) }

// latest is the later of the last output and the heartbeat file's
// modification time.
func (p *lifeSigns) latest() time.Time {
	t := time.Unix(0, p.last.Load())
	if p.heartbeat != "" {
		if fi, err := os.Lstat(p.heartbeat); err == nil && fi.ModTime().After(t) { // a link is not followed
			t = fi.ModTime()
		}
	}
	return t
}

// lifeSignsReader notes the time of every read that returns bytes.
type lifeSignsReader struct {
	r io.Reader
	p *lifeSigns
}

func (pr lifeSignsReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	if n > 0 {
		pr.p.saw(time.Now())
	}
	return n, err
}

// life is every sign of life gorun reads from one worker, for scripts
// that know nothing of gorun: its output and heartbeat file, its
// progress file's step, its probe's snapshots (steps, collectives, a
// moving stack), and the CPU time it uses.
type life struct {
	out          *lifeSigns
	progressFile string
	step         int
	snapshotFile string // "" without a probe
	probe        probe.Life
	cpu          time.Duration
	cpuAt        time.Time
	last         time.Time // the newest sign
	why          string    // what it was
}

func newLife(spec WorkerSpec, out *lifeSigns, now time.Time) *life {
	l := &life{out: out, last: now, why: "its start", cpuAt: now}
	l.progressFile, _ = lookupEnv(spec.Env, workerenv.ProgressFile)
	l.snapshotFile, _ = lookupEnv(spec.Env, workerenv.ProbeFile)
	return l
}

// update reads the worker's signs of life at now; treeCPU is the CPU
// time of the worker and all it started (0: unknown; its own is read
// then).
func (l *life) update(pid int, now time.Time, treeCPU time.Duration) {
	seen := func(t time.Time, why string) {
		if t.After(l.last) {
			l.last, l.why = t, why
		}
	}
	seen(l.out.latest(), "output or its heartbeat file")
	if l.progressFile != "" {
		if p, err := goodput.ReadProgress(l.progressFile); err == nil && p.Seen && p.Step != l.step {
			l.step = p.Step
			seen(now, "a step in its progress file")
		}
	}
	if l.snapshotFile != "" {
		if s, ok, err := probe.Read(l.snapshotFile); err == nil && ok {
			if why := l.probe.Observe(s); why != "" {
				seen(s.Time(), why)
			}
		}
	}
	cpu, err := treeCPU, error(nil)
	if cpu == 0 {
		cpu, err = proc.CPUTime(pid)
	}
	if err == nil {
		if used, wall := cpu-l.cpu, now.Sub(l.cpuAt); l.cpu > 0 && wall > 0 && float64(used) >= computing*float64(wall) {
			seen(now, "CPU time (computing, its children's included)")
		}
		l.cpu, l.cpuAt = cpu, now
	}
}

// snapshot is the probe's newest snapshot (nil without one).
func (l *life) snapshot() *probe.Snapshot {
	if s, ok := l.probe.Last(); ok {
		return &s
	}
	return nil
}

// evidenceSignal is the signal that makes a worker show where it is
// stuck when its probe cannot: SIGABRT for Python (PYTHONFAULTHANDLER
// prints every thread's traceback), SIGQUIT for a Go program (the runtime
// prints every goroutine), none for other programs.
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
