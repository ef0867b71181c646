package cmdline

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/golden"
	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/urfave/cli/v2"
)

// runReport runs `gorun report args...` through an app holding only the
// report command, and returns its output and exit code.
func runReport(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &cli.App{
		Name: "gorun", Writer: &out, ErrWriter: &errOut,
		Commands:       []*cli.Command{reportCommand()},
		ExitErrHandler: func(*cli.Context, error) {},
	}
	err := app.Run(append([]string{"gorun", "report"}, args...))
	var ec cli.ExitCoder
	switch {
	case err == nil:
	case errors.As(err, &ec):
		code = ec.ExitCode()
		errOut.WriteString(err.Error())
	default:
		code = 2 // as Main exits for an error of urfave's
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), code
}

// writeFile writes content to dir/name, making its folders.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReportGolden reports testdata/report/job, a finished run with one
// failure, and compares the text with testdata/report.txt (go test
// -update rewrites it).
func TestReportGolden(t *testing.T) {
	stdout, stderr, code := runReport(t, "testdata/report/job")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	golden.Check(t, "report.txt", stdout)
}

// TestReportRunning reports a running job from a --log-dir with two runs:
// the latest is picked and said so, and the running attempt's progress
// comes from its workers' progress files.
func TestReportRunning(t *testing.T) {
	logDir := t.TempDir()
	old := writeFile(t, logDir, "job/"+goodput.EventsFile, `{"time":"2026-03-01T11:00:00Z","event":"start"}`+"\n")
	events := `{"time":"2026-03-01T12:00:00Z","event":"start","run_id":"job"}
{"time":"2026-03-01T12:00:02Z","event":"spawn","attempt":3,"world_size":2}
`
	latest := writeFile(t, logDir, "job.1/"+goodput.EventsFile, events)
	writeFile(t, logDir, "job.1/attempt_3/0/progress", "step=40 time=1772366430000000000 first_step=1 first_time=1772366405000000000\n")
	writeFile(t, logDir, "job.1/attempt_3/1/progress", "step=41 time=1772366440000000000 first_step=1 first_time=1772366410000000000 loss=2.5\n")
	writeFile(t, logDir, "job.1/attempt_3/2/progress", "garbage\n")
	if err := os.Mkdir(filepath.Join(logDir, "job.1/attempt_3/3"), 0o700); err != nil { // no progress yet
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runReport(t, "--format", "json", "--now", "2026-03-01T12:01:00Z", logDir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "reporting "+filepath.Dir(latest)) || !strings.Contains(stderr, "attempt_3/2/progress") {
		t.Errorf("stderr %q does not name the run picked and warn of the bad progress file", stderr)
	}
	var r goodput.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	// spawned 12:00:02, first step 12:00:05, now 12:01:00.
	want := map[string]float64{"rendezvous": 2, "startup": 3, "productive": 55}
	for c, s := range r.Seconds {
		if s != want[c] {
			t.Errorf("%s = %v s, want %v s", c, s, want[c])
		}
	}
	if !r.Running || r.WallSeconds != 60 || len(r.Attempts) != 1 || r.Attempts[0].LastStep == nil || *r.Attempts[0].LastStep != 41 {
		t.Errorf("report %+v: want a running job, 60 s, one attempt at step 41", r)
	}
}

func TestReportErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Dir(writeFile(t, dir, "empty/"+goodput.EventsFile, ""))
	bad := filepath.Dir(writeFile(t, dir, "bad/"+goodput.EventsFile, "{\"time\":\"2026-03-01T12:00:00Z\",\"event\":\"start\"}\nnot json\n"))
	order := filepath.Dir(writeFile(t, dir, "order/"+goodput.EventsFile,
		`{"time":"2026-03-01T12:00:00Z","event":"start"}`+"\n"+`{"time":"2026-03-01T12:00:01Z","event":"end","how":"failed"}`+"\n"))
	file := writeFile(t, dir, "file", "")
	none := t.TempDir()
	huge := filepath.Dir(writeFile(t, dir, "huge/"+goodput.EventsFile, ""))
	if err := os.Truncate(filepath.Join(huge, goodput.EventsFile), 1<<30); err != nil { // sparse
		t.Fatal(err)
	}
	for i, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no LOGDIR", nil, 2, "want one LOGDIR"},
		{"two", []string{empty, bad}, 2, "got 2 arguments"},
		{"missing", []string{filepath.Join(dir, "missing")}, 2, "LOGDIR: stat " + filepath.Join(dir, "missing")},
		{"a file", []string{file}, 2, "LOGDIR " + file + " is not a folder"},
		{"no runs", []string{none}, 2, "LOGDIR " + none + " holds no events.jsonl"},
		{"no events", []string{empty}, 2, "has no events"},
		{"bad line", []string{bad}, 1, filepath.Join(bad, goodput.EventsFile) + ": line 2 is not a JSON event"},
		{"bad timeline", []string{order}, 1, "attempt 0 ended without a \"spawn\" event"},
		{"a gigabyte", []string{huge}, 1, "is 1024 MiB, above the 32 MiB a run's timeline can hold: not read"},
		{"format", []string{"--format", "yaml", empty}, 2, `--format="yaml": want text or json`},
		{"now", []string{"--now", "noon", empty}, 2, `--now="noon": want an RFC3339 time`},
	} {
		stdout, stderr, code := runReport(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) || stdout != "" {
			t.Errorf("case %d (%s): exit %d, stderr %q, stdout %q; want exit %d and %q", i, tt.name, code, stderr, stdout, tt.code, tt.want)
		}
	}
}
