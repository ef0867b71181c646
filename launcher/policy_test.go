package launcher

import (
	"strings"
	"testing"
	"time"
)

func TestRestartPolicy(t *testing.T) {
	p := RestartPolicy{MaxRestarts: 5, NoRestartExitCodes: []int{3}, Backoff: time.Second, BackoffMax: 5 * time.Second}
	tests := []struct {
		restarts int
		codes    []int
		restart  bool
		delay    time.Duration
		reason   string
	}{
		{0, []int{1}, true, time.Second, "restart 1 of 5"},
		{1, []int{1}, true, 2 * time.Second, "restart 2 of 5"},
		{2, []int{137}, true, 4 * time.Second, "restart 3 of 5"},
		{3, []int{1}, true, 5 * time.Second, "restart 4 of 5"},
		{4, []int{1}, true, 5 * time.Second, "restart 5 of 5"},
		{5, []int{1}, false, 0, "no restarts left"},
		{0, []int{1, 3}, false, 0, "exit code 3"},
	}
	for _, tt := range tests {
		d := p.Decide(tt.restarts, tt.codes)
		if d.Restart != tt.restart || d.Delay != tt.delay || !strings.Contains(d.Reason, tt.reason) {
			t.Errorf("Decide(%d, %v) = %+v; want restart %v delay %v reason ~%q", tt.restarts, tt.codes, d, tt.restart, tt.delay, tt.reason)
		}
	}
	if d := (RestartPolicy{MaxRestarts: 1}).Decide(0, []int{1}); !d.Restart || d.Delay != 0 {
		t.Errorf("no backoff: %+v; want an immediate restart", d)
	}
	huge := RestartPolicy{MaxRestarts: 1000, Backoff: time.Second, BackoffMax: time.Hour}
	if d := huge.Decide(200, nil); d.Delay != time.Hour {
		t.Errorf("200th restart delay = %v; want the cap, 1h (no overflow)", d.Delay)
	}
}
