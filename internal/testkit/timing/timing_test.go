package timing

import (
	"strings"
	"testing"
	"time"
)

func TestParseSlowdown(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		bad  bool
	}{
		{"1", 1, false},
		{"2.5", 2.5, false},
		{"100", 100, false},
		{"0.5", 0, true},
		{"0", 0, true},
		{"101", 0, true},
		{"NaN", 0, true},
		{"fast", 0, true},
	} {
		got, err := parseSlowdown(tc.in)
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), EnvSlowdown) || !strings.Contains(err.Error(), "from 1 to 100") {
				t.Errorf("%q: %v, %v; want an error naming %s and what it takes", tc.in, got, err, EnvSlowdown)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestStretch(t *testing.T) {
	t.Setenv(EnvSlowdown, "1.5")
	if got := Stretch(t, 2*time.Second); got != 3*time.Second {
		t.Errorf("Stretch(2s) at 1.5: %v; want 3s", got)
	}
	if got := LeaseTTL(t); got != 3*time.Second {
		t.Errorf("LeaseTTL at 1.5: %v; want 3s", got)
	}
	if got := Seconds(1500 * time.Millisecond); got != "1.5" {
		t.Errorf("Seconds(1.5s) = %q", got)
	}
	t.Setenv(EnvSlowdown, "")
	if got := Stretch(t, time.Second); got != time.Second {
		t.Errorf("Stretch(1s) unset: %v", got)
	}
}
