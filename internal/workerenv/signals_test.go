package workerenv

import (
	"strings"
	"syscall"
	"testing"
)

// TestStopSignalRoundTrip: every stop signal the agent can write, the
// workers read back as the same signal; a fault signal is refused on both
// sides.
func TestStopSignalRoundTrip(t *testing.T) {
	for _, name := range SignalNames(IsStopSignal) {
		sig, ok := Signal(name)
		if !ok {
			t.Fatalf("%s: not in the table", name)
		}
		got, err := ParseStopSignal(FormatStopSignal(sig))
		if err != nil || got != sig {
			t.Errorf("%s: wrote %q, read %v, %v", name, FormatStopSignal(sig), got, err)
		}
	}
	for _, tc := range []struct {
		in   string
		want syscall.Signal
		err  string
	}{
		{"", 0, ""},
		{"TERM", syscall.SIGTERM, ""},
		{"sigusr1", syscall.SIGUSR1, ""},
		{"PWR", syscall.SIGPWR, ""},
		{"ABRT", 0, "not a signal a worker can stop on"},
		{"SEGV", 0, "not a signal a worker can stop on"},
		{"NOPE", 0, "not a signal a worker can stop on"},
	} {
		got, err := ParseStopSignal(tc.in)
		if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseStopSignal(%q) = %v, %v; want %v, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestSignalListRoundTrip: the ignored signals' list reads back as
// written; an unknown name is an error that names it, not dropped.
func TestSignalListRoundTrip(t *testing.T) {
	sigs := []syscall.Signal{syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGPWR}
	v := FormatSignalList(sigs)
	if v != "USR1,TERM,PWR" {
		t.Errorf("FormatSignalList = %q", v)
	}
	got, err := ParseSignalList(v)
	if err != nil || len(got) != 3 || got[0] != sigs[0] || got[1] != sigs[1] || got[2] != sigs[2] {
		t.Errorf("ParseSignalList(%q) = %v, %v", v, got, err)
	}
	if _, err := ParseSignalList("USR1,BOGUS"); err == nil || !strings.Contains(err.Error(), `"BOGUS"`) {
		t.Errorf("an unknown name: %v; want an error naming it", err)
	}
	if got, err := ParseSignalList(""); err != nil || len(got) != 0 {
		t.Errorf("empty: %v, %v", got, err)
	}
}
