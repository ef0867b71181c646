package clock

import (
	"testing"
	"time"
)

func TestUncertainty(t *testing.T) {
	a := State{BootID: "a", Synced: false}
	b := State{BootID: "b", Synced: true, Error: 3 * time.Millisecond}
	c := State{BootID: "c", Synced: true, Error: time.Millisecond}
	cases := []struct {
		name     string
		states   []State
		d        time.Duration
		unsynced int
		ok       bool
	}{
		{"one host, not synced", []State{a, a}, 0, -1, true},
		{"two synced hosts", []State{b, c}, 6 * time.Millisecond, -1, true},
		{"a host not synced", []State{b, a, c}, 0, 1, false},
		{"unknown boot ids", []State{{Synced: true, Error: time.Millisecond}, {Synced: true}}, 2 * time.Millisecond, -1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, u, ok := Uncertainty(tc.states)
			if d != tc.d || u != tc.unsynced || ok != tc.ok {
				t.Errorf("Uncertainty = %v, %d, %v; want %v, %d, %v", d, u, ok, tc.d, tc.unsynced, tc.ok)
			}
		})
	}
}

func TestReadNamesThisBoot(t *testing.T) {
	s := Read()
	if s.BootID == "" {
		t.Skip("no /proc/sys/kernel/random/boot_id here")
	}
	if len(s.BootID) != 36 || Read().BootID != s.BootID {
		t.Errorf("boot id %q; want the same UUID on every read", s.BootID)
	}
}
