package comm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/memory"
)

// TestPreemptionAgreement runs Agree for real on 3 in-process ranks, each
// with its own stop file: when one rank's file appears, every rank gets
// true at the same step (and the others never saw a file); without one,
// every answer is false.
func TestPreemptionAgreement(t *testing.T) {
	const size, steps = 3, 8
	w := newWorld(t, size, memory.ModeAvoidRecordStream, 30*time.Second)
	for _, tc := range []struct {
		name               string
		every              int
		flagRank, flagStep int // the rank whose file appears before its check of flagStep (-1: none)
		firstTrue          int // the first step answered true (-1: none)
	}{
		{"no request", 0, -1, 0, -1},
		{"rank 1 before step 3", 1, 1, 3, 3},
		{"rank 2 before step 0", 1, 2, 0, 0},
		{"rank 0 before the last step", 1, 0, steps - 1, steps - 1},
		{"every 4, rank 1 before step 1", 4, 1, 1, 3},
		{"every 4, no request", 4, -1, 0, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dir := t.TempDir()
			got := make([][]bool, size)
			w.each(t, func(r int, g *Group) error {
				file := filepath.Join(dir, fmt.Sprintf("stop.%d", r))
				p, err := WatchPreemption(PreemptionConfig{StopFile: file, Every: tc.every})
				if err != nil {
					return err
				}
				defer p.Close()
				env := &Env{Group: g, Allocator: w.allocs[r]}
				for step := range steps {
					if r == tc.flagRank && step == tc.flagStep {
						if err := os.WriteFile(file, nil, 0o600); err != nil {
							return err
						}
					}
					stop, err := p.Agree(ctx, env, step)
					if err != nil {
						return err
					}
					got[r] = append(got[r], stop)
				}
				if want := r == tc.flagRank; p.Requested() != want {
					return fmt.Errorf("Requested() = %v; want %v (a rank's own view)", !want, want)
				}
				return nil
			})
			every := max(tc.every, 1)
			for r := range size {
				for step, stop := range got[r] {
					want := tc.firstTrue >= 0 && step >= tc.firstTrue && (step+1)%every == 0
					if stop != want {
						t.Errorf("rank %d step %d: Agree = %v; want %v (all ranks: %v)", r, step, stop, want, got)
					}
				}
			}
		})
	}
}

// TestPreemptionNothingWatched: without a stop file or signal (torchrun, a
// plain run) Agree runs no collective at all: a nil Env is never touched.
func TestPreemptionNothingWatched(t *testing.T) {
	p, err := WatchPreemption(PreemptionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Enabled() || p.Signal() != nil || p.Requested() {
		t.Fatalf("Enabled %v, Signal %v, Requested %v; want false, nil, false", p.Enabled(), p.Signal(), p.Requested())
	}
	for step := range 3 {
		if stop, err := p.Agree(context.Background(), nil, step); stop || err != nil {
			t.Fatalf("Agree = %v, %v; want false, nil", stop, err)
		}
	}
}

// TestPreemptionSignal: the stop signal with the stop file there sets
// the flag instead of ending the process; with the plain-stop mark there
// (gorun stopping the workers after a failure) it is a plain stop:
// Stopped fires, the flag stays clear. With neither (a scheduler's signal
// to every process of the job) the watcher waits for gorun's word: the
// stop file appearing a moment later makes it a stop request, the mark a
// plain stop.
func TestPreemptionSignal(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after string // file made before the signal, after it: "stop", "stop.plain" or ""
		request       bool
	}{
		{"stop file", "stop", "", true},
		{"plain-stop mark", "stop.plain", "", false},
		{"outside signal, then the stop file", "", "stop", true},
		{"outside signal, then the plain-stop mark", "", "stop.plain", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "stop")
			p, err := WatchPreemption(PreemptionConfig{Signal: "usr1", StopFile: file})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if p.Signal() != syscall.SIGUSR1 || !p.Enabled() {
				t.Fatalf("Signal %v, Enabled %v; want SIGUSR1, true", p.Signal(), p.Enabled())
			}
			if p.Requested() {
				t.Fatal("Requested before the signal")
			}
			ctx, cancel := p.Context(context.Background())
			defer cancel()
			create := func(name string) {
				if name != "" {
					if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			create(tc.before)
			if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			create(tc.after)
			if tc.request {
				proctest.WaitFor(t, "the signal to set the flag", 10*time.Second, p.Requested)
				if ctx.Err() != nil {
					t.Error("a stop request cancelled the context")
				}
				return
			}
			<-p.Stopped()
			<-ctx.Done()
			if p.Requested() {
				t.Error("a plain stop set the stop request's flag")
			}
			p.Close() // a second Close does nothing
		})
	}
}

func TestPreemptionConfig(t *testing.T) {
	for _, tc := range []struct {
		signal string
		every  int
		want   syscall.Signal // 0: none
		err    string
	}{
		{signal: "", want: 0},
		{signal: "TERM", want: syscall.SIGTERM},
		{signal: "usr1", want: syscall.SIGUSR1},
		{signal: "SIGUSR2", want: syscall.SIGUSR2},
		{signal: " INT ", want: syscall.SIGINT},
		{signal: "KILL", err: `comm: GORUN_STOP_SIGNAL="KILL": not a signal a worker can stop on; want one of`},
		{signal: "STOP", err: `GORUN_STOP_SIGNAL="STOP"`},
		{signal: "15", err: `GORUN_STOP_SIGNAL="15"`},
		{signal: "BOGUS", err: `GORUN_STOP_SIGNAL="BOGUS"`},
		{signal: "TERM", every: -1, err: "every -1: want at least 1"},
	} {
		t.Run(fmt.Sprintf("%q every %d", tc.signal, tc.every), func(t *testing.T) {
			p, err := WatchPreemption(PreemptionConfig{Signal: tc.signal, Every: tc.every})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v; want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if got := p.Signal(); (tc.want == 0 && got != nil) || (tc.want != 0 && got != tc.want) {
				t.Fatalf("Signal() = %v; want %v", got, tc.want)
			}
		})
	}
}

func TestNewPreemptionConfigFromEnv(t *testing.T) {
	t.Setenv(StopFileEnv, "/run/stop")
	t.Setenv(StopSignalEnv, "USR1")
	if got, want := NewPreemptionConfig(), (PreemptionConfig{StopFile: "/run/stop", Signal: "USR1", Every: 1}); got != want {
		t.Fatalf("NewPreemptionConfig() = %+v; want %+v", got, want)
	}
}

// fakeClock returns t0, t0+1s, t0+2s, ...
func fakeClock(t0 time.Time) func() time.Time {
	n := 0
	return func() time.Time { n++; return t0.Add(time.Duration(n-1) * time.Second) }
}

func TestProgressReporter(t *testing.T) {
	t0 := time.Unix(1700000000, 5)
	path := filepath.Join(t.TempDir(), "progress")
	var log bytes.Buffer
	r := newProgressReporter(path, &log, fakeClock(t0))
	for i, step := range []int{7, 8, 9} {
		if err := r.Step(step); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("step=%d time=%d first_step=7 first_time=%d\n", step, t0.Add(time.Duration(i)*time.Second).UnixNano(), t0.UnixNano())
		if string(got) != want {
			t.Errorf("after Step(%d): %q; want %q", step, got, want)
		}
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("%s.tmp left behind: %v", path, err)
	}
	if log.Len() != 0 {
		t.Errorf("warnings: %q", log.String())
	}
}

func TestProgressReporterFromEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "progress")
	t.Setenv(ProgressFileEnv, path)
	if err := NewProgressReporter().Step(3); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^step=3 time=\d+ first_step=3 first_time=\d+\n$`).Match(got) {
		t.Fatalf("progress file %q", got)
	}
	t.Setenv(ProgressFileEnv, "")
	if err := NewProgressReporter().Step(4); err != nil {
		t.Fatalf("without %s: %v; want nothing done", ProgressFileEnv, err)
	}
}

// TestProgressReporterFailure: a file that cannot be written is an error
// of each Step, and one warning, not a stop.
func TestProgressReporterFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no such dir", "progress")
	var log bytes.Buffer
	r := newProgressReporter(path, &log, time.Now)
	for step := range 3 {
		if err := r.Step(step); err == nil {
			t.Fatalf("Step(%d) wrote into a missing directory", step)
		}
	}
	if n := strings.Count(log.String(), "\n"); n != 1 || !strings.Contains(log.String(), ProgressFileEnv) {
		t.Fatalf("warnings %q; want one line naming %s", log.String(), ProgressFileEnv)
	}
}
