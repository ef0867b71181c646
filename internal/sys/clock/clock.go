// Package clock says how far this host's wall clock can be trusted
// against another host's: which boot (and so which clock) it is, and the
// kernel's estimate of its error from NTP or PTP discipline.
package clock

import (
	"os"
	"strings"
	"syscall"
	"time"
)

// staUnsync is the kernel's "clock not synchronized" status bit
// (STA_UNSYNC in <linux/timex.h>).
const staUnsync = 0x0040

// State is this host's clock as the kernel sees it.
type State struct {
	// BootID names this boot (/proc/sys/kernel/random/boot_id): processes
	// with the same one read the same clock, whatever its error.
	BootID string
	// Synced: a time daemon disciplines the clock; Error is then the
	// kernel's estimate of its error (adjtimex's esterror).
	Synced bool
	Error  time.Duration
}

// Read returns this host's clock state. What cannot be read is left
// unknown: no boot id, not synced.
func Read() State {
	var s State
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		s.BootID = strings.TrimSpace(string(b))
	}
	var tx syscall.Timex
	if _, err := syscall.Adjtimex(&tx); err == nil && tx.Status&staUnsync == 0 {
		s.Synced, s.Error = true, time.Duration(tx.Esterror)*time.Microsecond
	}
	return s
}

// Uncertainty is how far apart the clocks of states can be: zero when
// they are all one host's; else twice the largest error. ok is false
// when a host of another boot is not synchronized (then, with the first
// such state's index, nothing can be compared).
func Uncertainty(states []State) (d time.Duration, unsynced int, ok bool) {
	same := true
	for _, s := range states {
		if s.BootID == "" || s.BootID != states[0].BootID {
			same = false
		}
	}
	if same {
		return 0, -1, true
	}
	for i, s := range states {
		if !s.Synced {
			return 0, i, false
		}
		d = max(d, 2*s.Error)
	}
	return d, -1, true
}
