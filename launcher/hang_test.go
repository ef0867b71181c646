package launcher

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/gorun-dev/gorun/internal/sys/proc"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher/probe"
)

// Each of a worker's signs of life moves its clock: output, its
// heartbeat file, a step in its progress file, its probe's snapshot, CPU
// time; nothing else does.
func TestLifeSigns(t *testing.T) {
	cases := []struct {
		name string
		sign func(t *testing.T, dir string, out *lifeSigns, at time.Time)
		want string // "" for no sign
	}{
		{"nothing", func(*testing.T, string, *lifeSigns, time.Time) {}, ""},
		{"output", func(_ *testing.T, _ string, out *lifeSigns, at time.Time) { out.saw(at) }, "output or its heartbeat file"},
		{"heartbeat", func(t *testing.T, dir string, _ *lifeSigns, at time.Time) {
			writeAt(t, filepath.Join(dir, "heartbeat"), "", at)
		}, "output or its heartbeat file"},
		{"a step in the progress file", func(t *testing.T, dir string, _ *lifeSigns, at time.Time) {
			writeAt(t, filepath.Join(dir, goodput.ProgressFile), "step=5 time=1 first_step=1 first_time=1\n", at)
		}, "a step in its progress file"},
		{"a probe snapshot with a step", func(t *testing.T, dir string, _ *lifeSigns, at time.Time) {
			writeAt(t, filepath.Join(dir, probe.SnapshotFile), fmt.Sprintf(`{"version":1,"pid":9,"time_ns":%d,"steps":4,"stack":[["t.py",3,"main"]]}`, at.UnixNano()), at)
		}, "an optimizer step"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			start := time.Now().Add(-time.Minute)
			spec := WorkerSpec{Env: []string{workerenv.ProgressFile + "=" + filepath.Join(dir, goodput.ProgressFile), workerenv.ProbeFile + "=" + filepath.Join(dir, probe.SnapshotFile)}}
			out := newLifeSigns(filepath.Join(dir, "heartbeat"), start)
			l := newLife(spec, out, start)
			writeAt(t, filepath.Join(dir, probe.SnapshotFile), fmt.Sprintf(`{"version":1,"pid":9,"time_ns":%d,"steps":3,"stack":[["t.py",3,"main"]]}`, start.UnixNano()), start)
			l.update(-1, start, 0) // a pid that has no CPU time to read
			base := l.last
			at := start.Add(30 * time.Second)
			tc.sign(t, dir, out, at)
			l.update(-1, at, 0)
			switch {
			case tc.want == "" && l.last != base:
				t.Errorf("moved to %v by %q", l.last, l.why)
			case tc.want != "" && (l.why != tc.want || !l.last.Equal(at)):
				t.Errorf("last %v (%q); want %v (%q)", l.last, l.why, at, tc.want)
			}
		})
	}
}

// A worker that computes shows CPU time, also when its children compute
// (a data loader's workers, a subprocess) while it waits; one whose
// group sleeps does not.
func TestLifeCPU(t *testing.T) {
	cases := []struct {
		name, script string
		alive        bool
	}{
		{"computes", "while :; do :; done", true},
		{"waits for a child that computes", "sh -c 'while :; do :; done' & wait", true},
		{"waits for a child in a session of its own", `setsid sh -c 'echo $$ > "$SPIN_PID"; while :; do :; done' & wait`, true},
		{"sleeps", "sleep 60", false},
	}
	lives := make([]*life, len(cases))
	pids := make([]int, len(cases))
	start := time.Now()
	for i, c := range cases {
		cmd := exec.Command("sh", "-c", c.script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // as gorun starts workers
		spinPID := filepath.Join(t.TempDir(), "pid")
		cmd.Env = append(os.Environ(), "SPIN_PID="+spinPID)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			// The session's own child is out of the group: by its pid.
			if b, err := os.ReadFile(spinPID); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}()
		pids[i], lives[i] = cmd.Process.Pid, newLife(WorkerSpec{}, newLifeSigns("", start), start)
	}
	update := func(now time.Time) {
		cpus, err := proc.TreeCPUTimes(pids)
		if err != nil {
			t.Fatal(err)
		}
		for i := range cases {
			lives[i].update(pids[i], now, cpus[pids[i]])
		}
	}
	update(start)
	for i, c := range cases {
		if !c.alive {
			continue
		}
		proctest.WaitFor(t, c.name+": CPU time to count", 20*time.Second, func() bool {
			update(time.Now())
			return strings.HasPrefix(lives[i].why, "CPU time (computing")
		})
	}
	for i, c := range cases {
		if !c.alive && lives[i].why != "its start" {
			t.Errorf("%s: showed %q", c.name, lives[i].why)
		}
	}
}

func writeAt(t *testing.T, path, data string, at time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

func TestEvidenceSignal(t *testing.T) {
	self, err := os.Executable() // a Go test binary
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		e    Entrypoint
		want syscall.Signal
	}{
		{Entrypoint{Script: "train.py"}, syscall.SIGABRT},
		{Entrypoint{Script: "pkg.train", Module: true}, syscall.SIGABRT},
		{Entrypoint{Script: "/usr/bin/python3", NoPython: true}, syscall.SIGABRT},
		{Entrypoint{Script: self, NoPython: true}, syscall.SIGQUIT},
		{Entrypoint{Script: "/bin/sh", NoPython: true}, 0},
	} {
		if got := evidenceSignal(c.e); got != c.want {
			t.Errorf("%+v: %v; want %v", c.e, got, c.want)
		}
	}
}
