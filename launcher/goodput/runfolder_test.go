package goodput

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/launcher/probe"
)

// writeFile makes path's folders and writes content to it.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFindRunFolder(t *testing.T) {
	logDir := t.TempDir()
	older, newer := filepath.Join(logDir, "job_a"), filepath.Join(logDir, "job_b")
	writeFile(t, filepath.Join(older, EventsFile), "")
	writeFile(t, filepath.Join(newer, EventsFile), "")
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(older, EventsFile), old, old); err != nil {
		t.Fatal(err)
	}
	// A folder whose events file is a link is not a run folder.
	if err := os.Mkdir(filepath.Join(logDir, "job_z"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(older, EventsFile), filepath.Join(logDir, "job_z", EventsFile)); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(logDir, "file")
	writeFile(t, notDir, "")
	for _, tt := range []struct {
		name, dir, want string
		picked          bool
		err             string
	}{
		{name: "a run folder", dir: older, want: older},
		{name: "a log dir: the latest run", dir: logDir, want: newer, picked: true},
		{name: "no run", dir: t.TempDir(), err: "holds no " + EventsFile},
		{name: "not a folder", dir: notDir, err: "is not a folder"},
		{name: "missing", dir: filepath.Join(logDir, "none"), err: "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			run, picked, err := FindRunFolder(tt.dir)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("FindRunFolder(%s) = %s, %v; want an error saying %q", tt.dir, run, err, tt.err)
				}
				return
			}
			if err != nil || run != tt.want || picked != tt.picked {
				t.Errorf("FindRunFolder(%s) = %s, %v, %v; want %s, %v", tt.dir, run, picked, err, tt.want, tt.picked)
			}
		})
	}
}

func TestRunningProgress(t *testing.T) {
	run := t.TempDir()
	at := time.Now()
	writeFile(t, filepath.Join(AttemptDir(run, 1), "0", ProgressFile), "step=10 time=2000 first_step=1 first_time=1000\n")
	writeFile(t, filepath.Join(AttemptDir(run, 1), "1", ProgressFile), "step=12 time=3000 first_step=2 first_time=1500\n")
	writeFile(t, filepath.Join(AttemptDir(run, 1), "2", ProgressFile), "not progress\n")
	// Attempt 2's script knows nothing of gorun: its probes counted the
	// optimizer steps.
	writeFile(t, filepath.Join(AttemptDir(run, 2), "0", probe.SnapshotFile),
		`{"version": 1, "pid": 7, "time_ns": 9000, "steps": 5, "step_times_ns": [4000, 5000], "step_hook": true, "first_step_ns": 1000}`)
	writeFile(t, filepath.Join(AttemptDir(run, 2), "1", probe.SnapshotFile),
		`{"version": 1, "pid": 8, "time_ns": 9000, "steps": 6, "step_times_ns": [6000], "step_hook": true, "first_step_ns": 1200}`)
	spawn := func(n int) Event { return Event{Time: at, Kind: EventSpawn, Attempt: n} }
	for _, tt := range []struct {
		name     string
		events   []Event
		want     map[int]Progress
		warnings int
	}{
		{name: "attempt 1 runs", events: []Event{spawn(0), {Kind: EventEnd}, spawn(1)}, warnings: 1,
			want: map[int]Progress{1: MergeProgress(Progress{Step: 10, FirstStep: 1, Time: time.Unix(0, 2000), FirstTime: time.Unix(0, 1000), Seen: true},
				Progress{Step: 12, FirstStep: 2, Time: time.Unix(0, 3000), FirstTime: time.Unix(0, 1500), Seen: true})}},
		{name: "a script that knows nothing of gorun", events: []Event{spawn(0), {Kind: EventEnd}, spawn(2)},
			want: map[int]Progress{2: {Step: 6, FirstStep: 1, Time: time.Unix(0, 6000), FirstTime: time.Unix(0, 1000), Seen: true}}},
		{name: "nothing runs", events: []Event{spawn(0), {Kind: EventEnd}, spawn(1), {Kind: EventExit}}},
		{name: "its folder is gone", events: []Event{spawn(7)}, want: nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, warnings := RunningProgress(run, tt.events)
			if len(warnings) != tt.warnings {
				t.Errorf("warnings %v; want %d", warnings, tt.warnings)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("progress %v; want %v", got, tt.want)
			}
			for n, p := range tt.want {
				if g := got[n]; g.Step != p.Step || g.FirstStep != p.FirstStep || !g.Time.Equal(p.Time) || !g.FirstTime.Equal(p.FirstTime) {
					t.Errorf("attempt %d: %+v; want %+v", n, g, p)
				}
			}
		})
	}
}
