package flagval

import (
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/gorun-dev/gorun/launcher"
)

func TestParseNNodes(t *testing.T) {
	tests := []struct {
		in       string
		min, max int
		err      string
	}{
		{"1", 1, 1, ""},
		{"4", 4, 4, ""},
		{"2:4", 2, 4, ""},
		{" 2 : 4 ", 2, 4, ""},
		{"0", 0, 0, "out of range"},
		{"3:2", 0, 0, "out of range"},
		{"1:2:3", 0, 0, "more than one ':'"},
		{"a", 0, 0, "not an integer"},
		{"1:b", 0, 0, "not an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			lo, hi, err := ParseNNodes(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "--nnodes") {
					t.Fatalf("ParseNNodes(%q) error = %v; want one naming --nnodes and %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil || lo != tt.min || hi != tt.max {
				t.Fatalf("ParseNNodes(%q) = %d, %d, %v; want %d, %d", tt.in, lo, hi, err, tt.min, tt.max)
			}
		})
	}
}

func TestParseStdSpec(t *testing.T) {
	tests := []struct {
		in   string
		want launcher.StdSpec
		err  bool
	}{
		{"0", launcher.StdSpec{Default: launcher.StdNone}, false},
		{"3", launcher.StdSpec{Default: launcher.StdAll}, false},
		{"0:1,1:2", launcher.StdSpec{PerRank: map[int]launcher.Std{0: launcher.StdOut, 1: launcher.StdErr}}, false},
		{"12:3", launcher.StdSpec{PerRank: map[int]launcher.Std{12: launcher.StdAll}}, false},
		{"4", launcher.StdSpec{}, true},
		{"x", launcher.StdSpec{}, true},
		{"0:1,1", launcher.StdSpec{}, true},
		{"-1:1", launcher.StdSpec{}, true},
		{"0:7", launcher.StdSpec{}, true},
	}
	for _, tt := range tests {
		got, err := ParseStdSpec("tee", tt.in)
		if tt.err {
			if err == nil || !strings.Contains(err.Error(), "--tee") {
				t.Errorf("ParseStdSpec(%q) error = %v; want one naming --tee", tt.in, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseStdSpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	spec, _ := ParseStdSpec("tee", "1:3")
	if spec.For(0) != launcher.StdNone || spec.For(1) != launcher.StdAll || !spec.Any() {
		t.Errorf("spec 1:3: For(0)=%v For(1)=%v Any=%v; want 0, 3, true", spec.For(0), spec.For(1), spec.Any())
	}
}

func TestParseExitCodes(t *testing.T) {
	got, err := ParseExitCodes("no-restart-on-exit-codes", "2, 3")
	if err != nil || !reflect.DeepEqual(got, []int{2, 3}) {
		t.Fatalf("ParseExitCodes(\"2, 3\") = %v, %v; want [2 3]", got, err)
	}
	for _, bad := range []string{"0", "256", "a", "1,,2"} {
		if _, err := ParseExitCodes("no-restart-on-exit-codes", bad); err == nil || !strings.Contains(err.Error(), "--no-restart-on-exit-codes") {
			t.Errorf("ParseExitCodes(%q) error = %v; want one naming the flag", bad, err)
		}
	}
	if got, err := ParseExitCodes("x", ""); got != nil || err != nil {
		t.Errorf("ParseExitCodes(\"\") = %v, %v; want nil, nil", got, err)
	}
}

func TestParseSignals(t *testing.T) {
	got, err := ParseSignals("signals-to-handle", "SIGTERM, int,SIGUSR1")
	want := []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseSignals = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"SIGKILL", "SIGFOO", "", "STOP"} {
		if _, err := ParseSignals("signals-to-handle", bad); err == nil {
			t.Errorf("ParseSignals(%q) = nil error; want an error", bad)
		}
	}
	if launcher.SignalName(syscall.SIGTERM) != "SIGTERM" || launcher.SignalName(syscall.Signal(63)) != "signal 63" {
		t.Errorf("SignalName: %q, %q", launcher.SignalName(syscall.SIGTERM), launcher.SignalName(syscall.Signal(63)))
	}
}

func TestParseKeyValues(t *testing.T) {
	got, err := ParseKeyValues("rdzv-conf", " join_timeout = 5 ,is_host=true")
	if err != nil || !reflect.DeepEqual(got, map[string]string{"join_timeout": "5", "is_host": "true"}) {
		t.Fatalf("ParseKeyValues = %v, %v", got, err)
	}
	for _, bad := range []string{"a", "a=", "=b", "a=1,,"} {
		if _, err := ParseKeyValues("rdzv-conf", bad); err == nil || !strings.Contains(err.Error(), "--rdzv-conf") {
			t.Errorf("ParseKeyValues(%q) error = %v; want one naming --rdzv-conf", bad, err)
		}
	}
}
