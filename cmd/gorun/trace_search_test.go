package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/golden"

	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/watchdog"
)

// recordHang writes, with the flight recorder as comm's watchdog uses it,
// the dumps of world ranks into dir: every rank completed `done`
// all-reduces, and every rank but hung entered the next one, which hung
// never called.
func recordHang(t *testing.T, dir string, world, hung, done int) {
	t.Helper()
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ranks := make([]int, world)
	for r := range ranks {
		ranks[r] = r
	}
	for r := range world {
		rec := watchdog.NewRecorder(64)
		rec.AddGroup(0, "0", "world", ranks)
		for seq := range done + 1 {
			if seq == done && r == hung {
				break
			}
			id := rec.Record(watchdog.Entry{CollectiveSeqID: int64(seq), ProfilingName: "gorun:all_reduce",
				InputSizes: [][]int64{{1024}}, InputDtypes: []string{"float32"}}, at)
			rec.Started(id, at)
			if seq < done {
				rec.Completed(id, at.Add(time.Millisecond))
			}
		}
		if _, err := watchdog.WriteDump(dir, rec.Dump(r, world, "collective timeout", at)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTraceSearchesTheLogFolder: gorun trace given the log folder (what a
// user types, and what --log-dir was) finds the dumps in gorun's layout
// below it, analyses the latest attempt, or each with --all-attempts, and
// names them; given the dump folder itself it prints what it always did.
// Outputs are compared with testdata/trace/ (go test -update rewrites
// them).
func TestTraceSearchesTheLogFolder(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	// Run "job": attempt 0 hung on rank 1 at the 3rd all-reduce, attempt 1
	// on rank 2 at the 6th; the workers' log files lie beside the dumps.
	recordHang(t, filepath.Join(logs, "job", "attempt_0", "flight_recorder"), 3, 1, 2)
	recordHang(t, filepath.Join(logs, "job", "attempt_1", "flight_recorder"), 3, 2, 5)
	for a := range 2 {
		for lr := range 3 {
			d := filepath.Join(logs, "job", "attempt_"+strconv.Itoa(a), strconv.Itoa(lr))
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, "stderr.log"), []byte("worker output\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A folder with no dumps, and one whose only dumps lie behind a link
	// leading outside it.
	empty := filepath.Join(root, "empty", "job", "attempt_0", "0")
	linked := filepath.Join(root, "linked", "job", "attempt_0")
	for _, d := range []string{empty, linked} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(logs, "job", "attempt_1", "flight_recorder"), filepath.Join(linked, "flight_recorder")); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stream string // "stdout" or "stderr", compared with the golden file
	}{
		{"latest", []string{"trace", logs}, 0, "stdout"},
		{"all_attempts", []string{"trace", "--all-attempts", logs}, 0, "stdout"},
		{"all_attempts_after_dir", []string{"trace", logs, "--all-attempts"}, 0, "stdout"},
		{"run_folder", []string{"trace", filepath.Join(logs, "job")}, 0, "stdout"},
		{"latest_json", []string{"trace", logs, "--format", "json"}, 0, "stdout"},
		{"dump_folder", []string{"trace", filepath.Join(logs, "job", "attempt_0", "flight_recorder")}, 0, "stdout"},
		{"none", []string{"trace", filepath.Join(root, "empty")}, 1, "stderr"},
		{"link_outside", []string{"trace", filepath.Join(root, "linked")}, 1, "stderr"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runGorun(t, testEnv(), c.args...)
			if r.code != c.code {
				t.Fatalf("gorun %v: exit %d, want %d\n%s%s", c.args, r.code, c.code, r.stdout, r.stderr)
			}
			got := r.stdout
			if c.stream == "stderr" {
				got = r.stderr
			}
			got = strings.ReplaceAll(got, root, "ROOT")
			got = strings.ReplaceAll(got, private.FlightRecorderBase(), "TMP/gorun-flight-recorder-UID")
			got = strings.ReplaceAll(got, os.TempDir(), "TMP")
			name := filepath.Join("trace", c.name+".txt")
			if c.name == "all_attempts_after_dir" {
				name = filepath.Join("trace", "all_attempts.txt")
			}
			golden.Check(t, name, got)
		})
	}
}

// TestTraceOfARealHangAndRestart: a Go job whose rank 1 stops calling
// collectives hangs twice (one restart); the workers' own flight
// recorders dump into --log-dir, and gorun trace on that folder names
// the run's last attempt and, with --all-attempts, both.
func TestTraceOfARealHangAndRestart(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	r := runGorun(t, testEnv(), "--nproc-per-node=2", "--max-restarts=1", "--log-dir", logs, "--rdzv-id", "hang", "--no-python", ddpBin,
		"--steps", "10", "--hang-rank", "1", "--hang-step", "2", "--collective-timeout", "2s")
	if r.code == 0 {
		t.Fatalf("the hung job succeeded\n%s", r.stderr)
	}
	verdict := "rank(s) 0 wait in it; rank(s) 1 never called it"
	run := runFolder(t, logs, "hang")
	name := "run " + filepath.Base(run) + " attempt "
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"trace", logs}, []string{name + "1 (" + filepath.Join(run, "attempt_1", "flight_recorder") + "):", verdict,
			"(the latest of 2 attempts with dumps below " + logs + "; --all-attempts analyses each)"}},
		{[]string{"trace", logs, "--all-attempts"}, []string{name + "0 (", name + "1 (", verdict}},
	} {
		tr := runGorun(t, testEnv(), c.args...)
		if tr.code != 0 {
			t.Errorf("gorun %v: exit %d\n%s%s", c.args, tr.code, tr.stdout, tr.stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(tr.stdout, w) {
				t.Errorf("gorun %v lacks %q:\n%s", c.args, w, tr.stdout)
			}
		}
		if strings.Count(tr.stdout, verdict) != strings.Count(tr.stdout, name) {
			t.Errorf("gorun %v: not one verdict per attempt:\n%s", c.args, tr.stdout)
		}
	}
}
