package cmdline

import (
	"strings"
	"testing"
)

// TestLevelFromPython: LOGLEVEL takes Python's level names and numbers,
// and a value gorun cannot read leaves the default with a note instead
// of stopping the job.
func TestLevelFromPython(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, want, note string
	}{
		{"", "info", ""},
		{"CRITICAL", "error", ""},
		{"fatal", "error", ""},
		{"Error", "error", ""},
		{"WARN", "warning", ""},
		{"warning", "warning", ""},
		{"INFO", "info", ""},
		{"DEBUG", "debug", ""},
		{"NOTSET", "debug", ""},
		{"10", "debug", ""},
		{"20", "info", ""},
		{"30", "warning", ""},
		{"50", "error", ""},
		{" 40 ", "error", ""},
		{"verbose", "info", `LOGLEVEL="verbose" is not a Python log level`},
	} {
		got, note := levelFromPython(tt.in, "info")
		if got != tt.want || (tt.note == "") != (note == "") || !strings.Contains(note, tt.note) {
			t.Errorf("levelFromPython(%q) = %q, %q; want %q, a note with %q", tt.in, got, note, tt.want, tt.note)
		}
		if _, err := newLogger(got, nil); err != nil {
			t.Errorf("levelFromPython(%q) = %q: newLogger refuses it: %v", tt.in, got, err)
		}
	}
}
