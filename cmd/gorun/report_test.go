package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/internal/testkit/timing"
)

// The goodput report end to end: gorun's timeline (<log-dir>/<run-id>/
// events.jsonl), --report FILE, `gorun report` on a finished and a running
// job, and the short form at the end of the failure summary.

// reportCategories are the keys of a report's "seconds", in the order the
// text form lists them.
var reportCategories = []string{"rendezvous", "spare", "startup", "productive", "lost", "preemption", "teardown"}

// goodputJSON is the JSON form of a report (gorun report --format json,
// --report FILE), decoded by its documented field names.
type goodputJSON struct {
	RunID       string             `json:"run_id"`
	Node        string             `json:"node"`
	Start       time.Time          `json:"start"`
	End         time.Time          `json:"end"`
	Running     bool               `json:"running"`
	ExitCode    *int               `json:"exit_code"`
	WallSeconds float64            `json:"wall_seconds"`
	Seconds     map[string]float64 `json:"seconds"`
	ETTR        float64            `json:"effective_training_time_ratio"`
	Attempts    []struct {
		Attempt           int       `json:"attempt"`
		Round             int       `json:"round"`
		WorldSize         int       `json:"world_size"`
		Spawned           time.Time `json:"spawned"`
		Ended             time.Time `json:"ended"`
		How               string    `json:"how"`
		Reason            string    `json:"reason"`
		Measured          bool      `json:"measured"`
		FirstStep         *int      `json:"first_step"`
		LastStep          *int      `json:"last_step"`
		StartupSeconds    float64   `json:"startup_seconds"`
		ProductiveSeconds float64   `json:"productive_seconds"`
	} `json:"attempts"`
	Failures []struct {
		Attempt     int       `json:"attempt"`
		How         string    `json:"how"`
		Reason      string    `json:"reason"`
		From        time.Time `json:"from"`
		To          time.Time `json:"to"`
		LostSeconds float64   `json:"lost_seconds"`
	} `json:"failures"`
	Restarts int `json:"restarts"`
}

// timelineEvent is one line of events.jsonl, the fields these tests read.
type timelineEvent struct {
	Time          time.Time `json:"time"`
	Kind          string    `json:"event"`
	Attempt       int       `json:"attempt"`
	How           string    `json:"how"`
	Reason        string    `json:"reason"`
	Code          int       `json:"code"`
	LastProgress  time.Time `json:"last_progress"`
	FirstProgress time.Time `json:"first_progress"`
}

// decodeGoodput decodes a JSON report, failing the test on bad JSON.
func decodeGoodput(t *testing.T, what string, data []byte) goodputJSON {
	t.Helper()
	var r goodputJSON
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, data)
	}
	return r
}

// gorunReportJSON runs `gorun report --format json args...` and decodes
// what it prints; it returns the raw output too.
func gorunReportJSON(t *testing.T, args ...string) (goodputJSON, result) {
	t.Helper()
	r := runGorun(t, testEnv(), append([]string{"report", "--format", "json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("gorun report --format json %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
	}
	return decodeGoodput(t, "gorun report --format json", []byte(r.stdout)), r
}

// checkGoodputSums checks what every report must hold: every category
// present (and no other), not negative, and adding up to the wall time
// (within 1%, and in fact to the microsecond: they are summed in
// nanoseconds); ETTR is productive over wall; wall is end minus start.
func checkGoodputSums(t *testing.T, what string, r goodputJSON) {
	t.Helper()
	var keys []string
	var sum float64
	for k, v := range r.Seconds {
		keys = append(keys, k)
		sum += v
		if v < 0 {
			t.Errorf("%s: %s is %v seconds", what, k, v)
		}
	}
	slices.Sort(keys)
	want := slices.Clone(reportCategories)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("%s: categories %q; want %q", what, keys, want)
	}
	if r.WallSeconds <= 0 {
		t.Fatalf("%s: wall_seconds %v", what, r.WallSeconds)
	}
	if d := math.Abs(sum - r.WallSeconds); d > 0.01*r.WallSeconds {
		t.Errorf("%s: categories add up to %.9f s, wall_seconds is %.9f (off by %.1f%%)", what, sum, r.WallSeconds, 100*d/r.WallSeconds)
	} else if d > 1e-6 {
		t.Errorf("%s: categories add up to %.9f s, wall_seconds is %.9f: off by %.9f s; they should be exact", what, sum, r.WallSeconds, d)
	}
	if got := r.End.Sub(r.Start).Seconds(); math.Abs(got-r.WallSeconds) > 1e-6 {
		t.Errorf("%s: end - start is %.9f s, wall_seconds %.9f", what, got, r.WallSeconds)
	}
	if want := r.Seconds["productive"] / r.WallSeconds; math.Abs(r.ETTR-want) > 1e-9 {
		t.Errorf("%s: effective_training_time_ratio %v; want productive/wall = %v", what, r.ETTR, want)
	}
}

// readTimeline reads a run folder's events.jsonl.
func readTimeline(t *testing.T, run string) []timelineEvent {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(run, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var events []timelineEvent
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var e timelineEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("events.jsonl line %d: %v\n%s", i+1, err, data)
		}
		events = append(events, e)
	}
	return events
}

// eventKinds lists the events' kinds, in order.
func eventKinds(events []timelineEvent) []string {
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

var progressStepRE = regexp.MustCompile(`(?:^|\s)step=(\d+)(?:\s|$)`)

// progressStep is the step a worker's progress file reports, -1 when it
// has none yet.
func progressStep(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	m := progressStepRE.FindSubmatch(data)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// waitProgress waits until every local rank's progress file in an
// attempt's folder reports step atLeast or later.
func waitProgress(t *testing.T, attemptDir string, nproc, atLeast int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("every rank's progress file in %s at step %d", attemptDir, atLeast), func() bool {
		for lr := range nproc {
			if progressStep(filepath.Join(attemptDir, strconv.Itoa(lr), "progress")) < atLeast {
				return false
			}
		}
		return true
	})
}

// pidRecorder is a worker wrapper: it appends its pid (the worker's, after
// exec) to $REPORT_TEST_PID_DIR/pid.$RANK and runs its arguments.
const pidRecorder = `echo $$ >> "$REPORT_TEST_PID_DIR/pid.$RANK"
exec "$@"
`

// TestReportOfAJobWithOneFailure proves that for a job whose rank 1 is
// SIGKILLed once (bin/ddp, 2 workers, --max-restarts=1; it restarts and
// completes), the report that `gorun report --format json` prints, for the
// --log-dir and for the run folder alike, is right: its seconds add up to
// its wall time exactly, the wall time is the events' start to exit and
// within a few % of the time measured around gorun, one restart, one
// failure that names rank 1 and lost time from attempt 0's last step to
// attempt 1's spawn, startup and productive time; that --report FILE holds
// the same JSON byte for byte; that the text form names every category
// and the failure; and that a job that succeeded prints no short form.
func TestReportOfAJobWithOneFailure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logDir, pidDir, reportFile := filepath.Join(dir, "logs"), filepath.Join(dir, "pids"), filepath.Join(dir, "report.json")
	if err := os.Mkdir(pidDir, 0o755); err != nil {
		t.Fatal(err)
	}
	const runID = "report-one-failure"
	script := writeScript(t, pidRecorder)
	before := time.Now()
	cmd, stdout, stderr := startGorun(t, testEnv("REPORT_TEST_PID_DIR="+pidDir),
		"--nproc-per-node=2", "--max-restarts=1", "--rdzv-id", runID, "--log-dir", logDir, "--report", reportFile,
		"--no-python", script, ddpBin, "--steps", "40", "--step-time", "50ms")
	run := runFolder(t, logDir, runID)
	waitProgress(t, filepath.Join(run, "attempt_0"), 2, 3)
	pids := proctest.PIDs(t, filepath.Join(pidDir, "pid.1"))
	if len(pids) != 1 {
		t.Fatalf("rank 1's pids %v; want one (attempt 0's)", pids)
	}
	if environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pids[0])); !slices.Contains(strings.Split(string(environ), "\x00"), "RANK=1") {
		t.Fatalf("pid %d is not the worker of rank 1", pids[0])
	}
	killed := time.Now()
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL to rank 1 (pid %d): %v", pids[0], err)
	}
	code := waitExit(t, cmd)
	after := time.Now()
	measured := after.Sub(before)
	if code != 0 {
		t.Fatalf("gorun exit %d; want 0 (restarted, then completed)\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout.String(), "[default0]:final loss=") {
		t.Fatalf("the job did not complete:\n%s", stdout)
	}
	if strings.Contains(stderr.String(), "goodput:") {
		t.Errorf("a job that succeeded printed the failure summary's goodput short form:\n%s", stderr)
	}
	t.Logf("rank 1 killed %v after gorun started; gorun ran %v", killed.Sub(before).Round(time.Millisecond), measured.Round(time.Millisecond))

	// The report, from the --log-dir (gorun picks the run) and from the
	// run folder.
	r, out := gorunReportJSON(t, logDir)
	if !strings.Contains(out.stderr, run) {
		t.Errorf("gorun report %s did not say which run it reports (%s):\n%s", logDir, run, out.stderr)
	}
	if _, outRun := gorunReportJSON(t, run); out.stdout != outRun.stdout {
		t.Errorf("the report of the --log-dir and of the run folder differ:\n%s\n---\n%s", out.stdout, outRun.stdout)
	}
	checkGoodputSums(t, "report", r)

	// --report FILE: the same JSON.
	data, err := os.ReadFile(reportFile)
	if err != nil {
		t.Fatalf("--report: %v", err)
	}
	if string(data) != out.stdout {
		fr := decodeGoodput(t, "--report file", data)
		t.Errorf("--report %s differs from gorun report --format json:\n%s\n---\n%s", reportFile, data, out.stdout)
		for _, c := range reportCategories {
			if fr.Seconds[c] != r.Seconds[c] {
				t.Errorf("%s: --report says %v s, gorun report %v s", c, fr.Seconds[c], r.Seconds[c])
			}
		}
	}

	// The events' own times: start to exit, which lie within the time
	// measured around gorun.
	events := readTimeline(t, run)
	kinds := eventKinds(events)
	if want := []string{"start", "rendezvous", "spawn", "end", "rendezvous", "spawn", "end", "exit"}; !slices.Equal(kinds, want) {
		t.Errorf("events %q; want %q", kinds, want)
	}
	first, last := events[0], events[len(events)-1]
	if !r.Start.Equal(first.Time) || !r.End.Equal(last.Time) || last.Kind != "exit" {
		t.Errorf("report from %v to %v; the events from %v (%s) to %v (%s)", r.Start, r.End, first.Time, first.Kind, last.Time, last.Kind)
	}
	if r.Start.Before(before) || r.End.After(after) {
		t.Errorf("report from %v to %v; gorun ran from %v to %v", r.Start, r.End, before, after)
	}
	wall := time.Duration(r.WallSeconds * float64(time.Second))
	// The slack is gorun's own start and exit, outside its events.
	if slack := max(measured/10, timing.ExitSlack(t)); measured-wall > slack {
		t.Errorf("wall_seconds %v; gorun ran %v, more than %v longer", wall, measured, slack)
	}
	t.Logf("wall %v of %v measured; seconds %v", wall.Round(time.Millisecond), measured.Round(time.Millisecond), r.Seconds)

	if r.RunID != runID || r.Running || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Errorf("run_id %q running %v exit_code %v; want %q, false, 0", r.RunID, r.Running, r.ExitCode, runID)
	}
	if r.Restarts != 1 {
		t.Errorf("restarts %d; want 1", r.Restarts)
	}
	for _, c := range []string{"startup", "productive", "lost"} {
		if r.Seconds[c] <= 0 {
			t.Errorf("%s: %v seconds; want some", c, r.Seconds[c])
		}
	}
	for _, c := range []string{"spare", "preemption"} {
		if r.Seconds[c] != 0 {
			t.Errorf("%s: %v seconds; want none", c, r.Seconds[c])
		}
	}
	if len(r.Attempts) != 2 {
		t.Fatalf("attempts %+v; want 2", r.Attempts)
	}
	a0, a1 := r.Attempts[0], r.Attempts[1]
	if a0.How != "failed" || !strings.Contains(a0.Reason, "rank 1 ") || !a0.Measured || a0.LastStep == nil || *a0.LastStep < 3 {
		t.Errorf("attempt 0: %+v; want failed, rank 1 named, measured, past step 3", a0)
	}
	if a1.Attempt != 1 || a1.How != "succeeded" || a1.LastStep == nil || *a1.LastStep != 39 || a1.WorldSize != 2 {
		t.Errorf("attempt 1: %+v; want succeeded up to step 39 on 2 workers", a1)
	}
	if got := a0.ProductiveSeconds + a1.ProductiveSeconds; math.Abs(got-r.Seconds["productive"]) > 1e-6 {
		t.Errorf("the attempts' productive seconds add up to %v; the report's %v", got, r.Seconds["productive"])
	}
	// bin/ddp starts from step 0 again: attempt 1 took 40 steps of 50 ms.
	if a1.ProductiveSeconds < 39*0.05 {
		t.Errorf("attempt 1 productive %v s; 39 steps of 50 ms take more", a1.ProductiveSeconds)
	}
	if len(r.Failures) != 1 {
		t.Fatalf("failures %+v; want 1", r.Failures)
	}
	f := r.Failures[0]
	if f.Attempt != 0 || f.How != "failed" || f.LostSeconds <= 0 || !strings.Contains(f.Reason, "rank 1 ") || !strings.Contains(f.Reason, "SIGKILL") {
		t.Errorf("failure %+v; want attempt 0 failed, time lost, rank 1 killed by SIGKILL named", f)
	}
	if math.Abs(f.LostSeconds-r.Seconds["lost"]) > 1e-6 {
		t.Errorf("the failure lost %v s; the report's lost is %v", f.LostSeconds, r.Seconds["lost"])
	}
	// From attempt 0's last reported step to attempt 1's spawn.
	if end := events[3]; !f.From.Equal(end.LastProgress) {
		t.Errorf("the loss runs from %v; attempt 0's last step was at %v", f.From, end.LastProgress)
	}
	if !f.To.Equal(a1.Spawned) || !f.To.Equal(events[5].Time) {
		t.Errorf("the loss runs to %v; attempt 1 spawned at %v (event %v)", f.To, a1.Spawned, events[5].Time)
	}
	if f.From.Before(before) || !f.From.Before(killed.Add(time.Second)) {
		t.Errorf("the loss runs from %v; rank 1 was killed at %v", f.From, killed)
	}

	// The text form.
	text := runGorun(t, testEnv(), "report", logDir)
	if text.code != 0 {
		t.Fatalf("gorun report: exit %d\n%s", text.code, text.stderr)
	}
	for _, c := range append(slices.Clone(reportCategories), "total") {
		if !regexp.MustCompile(`(?m)^` + c + ` +\d+\.\d{3} +\d+\.\d$`).MatchString(text.stdout) {
			t.Errorf("the text report has no line for %s:\n%s", c, text.stdout)
		}
	}
	for _, want := range []string{"goodput of run " + runID + " on node ", "(exit code 0)", ", 1 restart\n", "\nfailures (",
		"killed by SIGKILL", fmt.Sprintf("%.3f", f.LostSeconds), "succeeded", "0-39"} {
		if !strings.Contains(text.stdout, want) {
			t.Errorf("the text report lacks %q:\n%s", want, text.stdout)
		}
	}
	if !regexp.MustCompile(`(?m)^0 +failed +\d+\.\d{3} +.+ +\d\d:\d\d:\S+ +\d\d:\d\d:\S+ +rank 1 on `).MatchString(text.stdout) {
		t.Errorf("the text report's failures do not name rank 1:\n%s", text.stdout)
	}

	// Not the report's fault, but its number shows it: a SIGKILLed rank
	// never dumps its flight recorder, and the others are asked to stop
	// (SIGTERM) at once, so they should wait watchdog.StopDumpGrace (1 s)
	// for its dump, not the whole DefaultDumpWait (10 s) (docs/watchdog.md).
	t.Run("a killed rank costs less than the 10 s dump wait", func(t *testing.T) {
		if f.LostSeconds > 5 {
			t.Errorf("the failure lost %.3f s from rank 1's last step to the restart; want about 1 s (StopDumpGrace): "+
				"rank 0 waited the whole 10 s DefaultDumpWait for rank 1's flight-recorder dump\nstderr:\n%s", f.LostSeconds, stderr)
		}
	})
}

// progressThenFail reports step 0 through GORUN_PROGRESS_FILE (write
// <path>.tmp, rename), works 0.3 s more and exits 3.
const progressThenFail = `t=$(date +%s%N)
printf 'step=0 time=%s first_step=0 first_time=%s\n' "$t" "$t" > "$GORUN_PROGRESS_FILE.tmp"
mv "$GORUN_PROGRESS_FILE.tmp" "$GORUN_PROGRESS_FILE"
sleep 0.3
exit 3
`

var (
	shortFirstRE  = regexp.MustCompile(`^goodput: (\d+\.\d)% productive \(ETTR\) of (\S+?)(, 1 restart)?(: .*)?$`)
	shortSecondRE = regexp.MustCompile(`^goodput: lost (\S+) in (\d+) failures?: (.*)$`)
)

// TestReportShortFormInFailureSummary proves that a job that fails with no
// restart left (a shell worker that reports one step and exits 3) prints,
// on stderr, the torchrun-style failure summary followed at once by the
// goodput report's short form (Report.Short): "goodput: <ETTR>%
// productive (ETTR) of <wall>[, 1 restart]: <category> <time>, ..." and
// "goodput: lost <time> in <n> failure(s): attempt <n> failed (<reason>)",
// whose numbers agree with `gorun report` on the same run.
func TestReportShortFormInFailureSummary(t *testing.T) {
	t.Parallel()
	for _, restarts := range []int{0, 1} {
		t.Run("max-restarts="+strconv.Itoa(restarts), func(t *testing.T) {
			t.Parallel()
			logDir := t.TempDir()
			script := writeScript(t, progressThenFail)
			r := runGorun(t, testEnv(), "--max-restarts="+strconv.Itoa(restarts), "--log-dir", logDir, "--rdzv-id", "short", "--no-python", script)
			if r.code != 3 {
				t.Fatalf("exit %d; want the worker's 3\n%s", r.code, r.stderr)
			}
			lines := strings.Split(r.stderr, "\n")
			i := slices.IndexFunc(lines, func(l string) bool { return l == "Root Cause (first observed failure):" })
			if i < 0 || !slices.Contains(lines[:i], script+" FAILED") {
				t.Fatalf("no failure summary on stderr:\n%s", r.stderr)
			}
			end := i + slices.IndexFunc(lines[i:], func(l string) bool { return strings.HasPrefix(l, "=====") })
			if end < i || end+2 >= len(lines) {
				t.Fatalf("the failure summary does not end, or nothing follows it:\n%s", r.stderr)
			}
			first, second := lines[end+1], lines[end+2]
			m1, m2 := shortFirstRE.FindStringSubmatch(first), shortSecondRE.FindStringSubmatch(second)
			if m1 == nil || m2 == nil {
				t.Fatalf("the failure summary is not followed by the goodput short form:\n%s", r.stderr)
			}
			// The worker reported steps and no checkpoint: the third line
			// says its steps count as if saved.
			if n := strings.Count(r.stderr, "goodput:"); n != 3 || end+3 >= len(lines) || !strings.HasPrefix(lines[end+3], "goodput: no checkpoint seen before a failure") {
				t.Errorf("%d goodput lines; want 3, the last on the unseen checkpoint\n%s", n, r.stderr)
			}

			rep, _ := gorunReportJSON(t, logDir)
			checkGoodputSums(t, "report", rep)
			if rep.ExitCode == nil || *rep.ExitCode != 3 || rep.Restarts != restarts || len(rep.Failures) != restarts+1 {
				t.Fatalf("report: exit_code %v, restarts %d, %d failures; want 3, %d, %d", rep.ExitCode, rep.Restarts, len(rep.Failures), restarts, restarts+1)
			}
			// The short form says what the report says. The agent's
			// report ends when the summary is printed, the file's at the
			// exit event a moment later; both are rounded to 0.1 s.
			near := func(what, got string, want float64) {
				t.Helper()
				d, err := time.ParseDuration(got)
				if err != nil || math.Abs(d.Seconds()-want) > 0.15 {
					t.Errorf("short form: %s %q; the report says %.3f s\n%s\n%s", what, got, want, first, second)
				}
			}
			if got, err := strconv.ParseFloat(m1[1], 64); err != nil || math.Abs(got-100*rep.ETTR) > 0.2 {
				t.Errorf("short form: %s%% productive; the report %.2f%%", m1[1], 100*rep.ETTR)
			}
			near("wall time", m1[2], rep.WallSeconds)
			if (m1[3] != "") != (restarts == 1) {
				t.Errorf("short form %q; want \", 1 restart\" only after a restart", first)
			}
			if m := regexp.MustCompile(`[:,] lost (\S+?)(,|$)`).FindStringSubmatch(m1[4]); m == nil {
				t.Errorf("short form %q names no lost time", first)
			} else {
				near("lost", m[1], rep.Seconds["lost"])
			}
			lost, err := time.ParseDuration(m2[1])
			if err != nil || lost < time.Duration(restarts+1)*300*time.Millisecond {
				t.Errorf("short form %q: lost %q; each failure lost the 0.3 s after its step", second, m2[1])
			}
			if m2[2] != strconv.Itoa(restarts+1) {
				t.Errorf("short form %q; want %d failures", second, restarts+1)
			}
			cause := regexp.MustCompile(`attempt [01] failed \(rank 0 on \S+ exited with code 3\)$`)
			if !cause.MatchString(m2[3]) || (restarts == 1) != strings.HasPrefix(m2[3], "the most, ") {
				t.Errorf("short form %q; want the (worst) failure's attempt and reason", second)
			}
		})
	}
}

// TestReportOfARunningJob proves that `gorun report` reports a job while
// it runs (bin/ddp, 2 workers, slow steps): the text says "still
// running" where a finished job's says its exit code, the JSON has
// running true and no exit_code, its one attempt is "running", its
// productive time (from the workers' progress files) is above zero once
// they report steps and grows as they go on; once the job is stopped
// (SIGTERM: a stop request, exit 75) the report is final: not running,
// exit code 75, the attempt preempted, time charged to preemption.
func TestReportOfARunningJob(t *testing.T) {
	t.Parallel()
	logDir := t.TempDir()
	const runID = "report-running"
	cmd, stdout, stderr := startGorun(t, testEnv(), "--nproc-per-node=2", "--rdzv-id", runID, "--log-dir", logDir,
		"--no-python", ddpBin, "--steps", "2000", "--step-time", "50ms")
	run := runFolder(t, logDir, runID)
	attempt := filepath.Join(run, "attempt_0")
	waitProgress(t, attempt, 2, 3)

	text := runGorun(t, testEnv(), "report", run)
	if text.code != 0 {
		t.Fatalf("gorun report: exit %d\n%s", text.code, text.stderr)
	}
	if !strings.Contains(text.stdout, "(still running)") || strings.Contains(text.stdout, "exit code") {
		t.Errorf("the report of a running job does not say it runs:\n%s", text.stdout)
	}
	if !regexp.MustCompile(`(?m)^0 +0 +2 +\S+ +- +running +\d+\.\d{3} +\d+\.\d{3} +\d+-\d+ +- +-$`).MatchString(text.stdout) {
		t.Errorf("the running attempt is not listed as running, with its steps:\n%s", text.stdout)
	}

	asked := time.Now()
	r1, _ := gorunReportJSON(t, run)
	checkGoodputSums(t, "running", r1)
	if !r1.Running || r1.ExitCode != nil {
		t.Errorf("running %v, exit_code %v; want true and none", r1.Running, r1.ExitCode)
	}
	if r1.End.Before(asked) || r1.End.After(time.Now()) {
		t.Errorf("a running job's report ends at %v; it was asked for at %v", r1.End, asked)
	}
	if len(r1.Attempts) != 1 || r1.Attempts[0].How != "running" || !r1.Attempts[0].Measured || r1.Attempts[0].LastStep == nil || *r1.Attempts[0].LastStep < 3 {
		t.Fatalf("attempts %+v; want one running, measured, past step 3", r1.Attempts)
	}
	if r1.Seconds["productive"] <= 0 || r1.Seconds["startup"] <= 0 || len(r1.Failures) != 0 {
		t.Errorf("seconds %v, failures %+v; want startup and productive time, no failure", r1.Seconds, r1.Failures)
	}

	// Later steps: more productive time, and the later step.
	step := *r1.Attempts[0].LastStep
	waitProgress(t, attempt, 2, step+3)
	r2, _ := gorunReportJSON(t, run)
	checkGoodputSums(t, "running, later", r2)
	if r2.Seconds["productive"] <= r1.Seconds["productive"] || r2.Attempts[0].LastStep == nil || *r2.Attempts[0].LastStep < step+3 {
		t.Errorf("later: productive %v s up to step %v; before %v s up to step %d", r2.Seconds["productive"], r2.Attempts[0].LastStep, r1.Seconds["productive"], step)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != 75 {
		t.Fatalf("gorun exit %d after SIGTERM; want 75 (preempted cleanly)\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	done, _ := gorunReportJSON(t, run)
	checkGoodputSums(t, "stopped", done)
	if done.Running || done.ExitCode == nil || *done.ExitCode != 75 || len(done.Attempts) != 1 || done.Attempts[0].How != "preempted" {
		t.Errorf("stopped: running %v, exit_code %v, attempts %+v; want not running, 75, one preempted", done.Running, done.ExitCode, done.Attempts)
	}
	if done.Seconds["preemption"] <= 0 || done.Seconds["productive"] < r2.Seconds["productive"] || done.Seconds["lost"] != 0 {
		t.Errorf("stopped: seconds %v; want preemption time, at least the %v s productive seen running, nothing lost", done.Seconds, r2.Seconds["productive"])
	}
}

// TestReportBadInput proves that `gorun report` refuses what it cannot
// report with a message that names the culprit: a missing LOGDIR, a
// folder without runs, an empty timeline, a bad --format (exit 2); a
// timeline with a line that is not JSON, or events out of order (exit 1,
// naming the file and the line or event); and that a last line cut short
// (an agent killed while writing it) is skipped, not an error.
func TestReportBadInput(t *testing.T) {
	t.Parallel()
	const (
		start = `{"time":"2026-01-01T00:00:00Z","event":"start","node":"n0","run_id":"r"}` + "\n"
		rdzv  = `{"time":"2026-01-01T00:00:01Z","event":"rendezvous"}` + "\n"
		spawn = `{"time":"2026-01-01T00:00:02Z","event":"spawn","world_size":1}` + "\n"
		early = `{"time":"2025-12-31T23:59:59Z","event":"spawn","world_size":1}` + "\n"
	)
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	for _, tc := range []struct {
		name   string
		events *string  // events.jsonl's content; nil: no file
		args   []string // before the folder
		path   string   // the folder; "": the test's, with events.jsonl
		code   int
		want   []string // in stderr; "EVENTS" is the file's path, "DIR" the folder's
	}{
		{name: "missing folder", path: missing, code: 2, want: []string{missing}},
		{name: "no runs", code: 2, want: []string{"DIR", "events.jsonl"}},
		{name: "empty timeline", events: reportPtr(""), code: 2, want: []string{"EVENTS", "no events"}},
		{name: "bad format", events: reportPtr(start), args: []string{"--format", "xml"}, code: 2, want: []string{"xml"}},
		{name: "line not JSON", events: reportPtr(start + rdzv + "{not json\n" + spawn), code: 1, want: []string{"EVENTS", "line 3"}},
		{name: "last line not JSON", events: reportPtr(start + rdzv + "garbage\n"), code: 1, want: []string{"EVENTS", "line 3"}},
		{name: "out of order", events: reportPtr(start + rdzv + early), code: 1, want: []string{"EVENTS", "event 3", "out of order"}},
		{name: "last line cut short", events: reportPtr(start + rdzv + spawn + `{"time":"2026-01-01T00:0`), code: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			events := filepath.Join(dir, "events.jsonl")
			if tc.events != nil {
				if err := os.WriteFile(events, []byte(*tc.events), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			path := tc.path
			if path == "" {
				path = dir
			}
			args := append(slices.Clone(tc.args), "--now", "2026-01-01T00:00:10Z", path)
			r := runGorun(t, testEnv(), append([]string{"report"}, args...)...)
			if r.code != tc.code {
				t.Fatalf("gorun report %q: exit %d; want %d\nstdout:\n%s\nstderr:\n%s", args, r.code, tc.code, r.stdout, r.stderr)
			}
			for _, w := range tc.want {
				w = strings.NewReplacer("EVENTS", events, "DIR", dir).Replace(w)
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if tc.code != 0 {
				if r.stdout != "" {
					t.Errorf("a refused report printed on stdout:\n%s", r.stdout)
				}
				return
			}
			// The cut line is skipped: a job spawned at 00:00:02 that
			// runs still at 00:00:10, with no step reported.
			if !strings.Contains(r.stdout, "(still running)") ||
				!regexp.MustCompile(`(?m)^rendezvous +2\.000 +20\.0$`).MatchString(r.stdout) ||
				!regexp.MustCompile(`(?m)^startup +8\.000 +80\.0$`).MatchString(r.stdout) {
				t.Errorf("report of a timeline cut short:\n%s", r.stdout)
			}
		})
	}
}

// reportPtr is a pointer to s.
func reportPtr(s string) *string { return &s }
