package launcher

import (
	"strings"
	"testing"
	"time"
)

func TestRestartPolicyRetriable(t *testing.T) {
	p := RestartPolicy{NoRestartExitCodes: []int{3, 42}}
	tests := []struct {
		codes  []int
		ok     bool
		reason string
	}{
		{[]int{1}, true, ""},
		{[]int{137, 1}, true, ""},
		{[]int{1, 42}, false, "exit code 42"},
		{nil, true, ""},
	}
	for _, tt := range tests {
		ok, reason := p.Retriable(tt.codes)
		if ok != tt.ok || !strings.Contains(reason, tt.reason) {
			t.Errorf("Retriable(%v) = %v, %q; want %v, ~%q", tt.codes, ok, reason, tt.ok, tt.reason)
		}
	}
}

func TestRestartPolicyDelay(t *testing.T) {
	p := RestartPolicy{Backoff: time.Second, BackoffMax: 5 * time.Second}
	for restarts, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		if got := p.Delay(restarts); got != want {
			t.Errorf("Delay(%d) = %v; want %v", restarts, got, want)
		}
	}
	if d := (RestartPolicy{}).Delay(3); d != 0 {
		t.Errorf("no backoff: Delay = %v; want 0", d)
	}
	huge := RestartPolicy{Backoff: time.Second, BackoffMax: time.Hour}
	if d := huge.Delay(200); d != time.Hour {
		t.Errorf("200th restart delay = %v; want the cap, 1h (no overflow)", d)
	}
}
