package launcher

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/golden"
)

func TestFormatSummary(t *testing.T) {
	at := time.Date(2026, 11, 29, 15, 41, 40, 123e6, time.UTC)
	var tb []string
	tb = append(tb, "Traceback (most recent call last):")
	for i := range 40 {
		tb = append(tb, fmt.Sprintf("  File \"train.py\", line %d, in f%d", i+1, i))
	}
	tb = append(tb, "RuntimeError: boom from rank 1")
	failures := []Failure{
		{LocalRank: 1, Rank: 1, PID: 17129, ExitCode: 1, Time: at, Host: "node0",
			ErrorFile: "/logs/none/attempt_0/1/error.json", Logs: []string{"/logs/none/attempt_0/1/stderr.log"},
			Error: &ErrorReport{Message: "RuntimeError: boom from rank 1", Traceback: strings.Join(tb, "\n") + "\n"}},
		{LocalRank: 2, Rank: 2, PID: 17130, ExitCode: 137, Signal: syscall.SIGKILL, Time: at.Add(time.Millisecond), Host: "node0"},
		{LocalRank: 0, Rank: 0, PID: 17128, ExitCode: 3, Time: at.Add(2 * time.Millisecond), Host: "node0"},
	}
	py := Entrypoint{Script: "train.py"}
	golden.Check(t, "summary.txt", FormatSummary(py, failures))
	golden.Check(t, "summary_single.txt", FormatSummary(py, failures[2:]))
	if FormatSummary(py, nil) != "" {
		t.Error("FormatSummary with no failures is not empty")
	}
}

// TestFormatSummaryHint: only a Python worker is told about PyTorch's
// @record; another program is told what to write.
func TestFormatSummaryHint(t *testing.T) {
	f := []Failure{{LocalRank: 0, Rank: 0, PID: 7, ExitCode: 3, Host: "node0"}}
	for _, tt := range []struct {
		name   string
		e      Entrypoint
		record bool
	}{
		{"script", Entrypoint{Script: "train.py"}, true},
		{"module", Entrypoint{Script: "pkg.train", Module: true}, true},
		{"run-path", Entrypoint{Script: "train.py", NoPython: true, RunPath: true}, true},
		{"no-python", Entrypoint{Script: "bin/ddp", NoPython: true}, false},
		{"no-python python", Entrypoint{Script: "/venv/bin/python3.11", NoPython: true}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := FormatSummary(tt.e, f)
			if strings.Contains(got, "errors.record") != tt.record {
				t.Errorf("mentions @record: %v, want %v:\n%s", !tt.record, tt.record, got)
			}
			if !tt.record && !strings.Contains(got, "$TORCHELASTIC_ERROR_FILE") {
				t.Errorf("a Go worker is not told where to write its error:\n%s", got)
			}
		})
	}
}

// TestFormatSummaryLastLine: a worker without an error file shows the
// last line of its stderr; one that Python could not start is not told
// to decorate its main with @record.
func TestFormatSummaryLastLine(t *testing.T) {
	for _, tt := range []struct {
		last, want, not string
	}{
		{"python3: can't open file '/w/nosuch.py': [Errno 2] No such file or directory", "could not start the script", "@record"},
		{"/usr/bin/python3: No module named pkg.train", "could not start the script", "record"},
		{"ValueError: bad batch", "errors.record to get one", "could not start"},
	} {
		got := FormatSummary(Entrypoint{Script: "train.py"}, []Failure{{Rank: 0, ExitCode: 1, LastLine: tt.last}})
		if !strings.Contains(got, "  last line : "+tt.last) || !strings.Contains(got, tt.want) || strings.Contains(got, tt.not) {
			t.Errorf("%q: want the line, %q and not %q:\n%s", tt.last, tt.want, tt.not, got)
		}
	}
	if got := lastLine("Traceback:\n  x\nValueError: bad batch\n\n"); got != "ValueError: bad batch" {
		t.Errorf("lastLine = %q", got)
	}
}
