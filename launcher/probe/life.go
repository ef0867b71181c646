package probe

import (
	"slices"
	"strings"
	"time"

	"github.com/gorun-dev/gorun/watchdog"
)

// Life follows one worker's snapshots and says when it last showed a
// sign of life: an optimizer step, a collective enqueued or completed,
// or a main-thread stack that moved. A rank waiting in a collective for
// another shows none of these, which is the point: the job is hung only
// when no rank shows any.
type Life struct {
	last Snapshot
	seen bool
}

// Observe takes the worker's newest snapshot and returns what it shows
// ("" for nothing new; a snapshot seen before shows nothing).
func (l *Life) Observe(s Snapshot) string {
	prev, seen := l.last, l.seen
	if seen && s.TimeNs == prev.TimeNs {
		return ""
	}
	l.last, l.seen = s, true
	switch {
	case !seen:
		return "its probe started"
	case s.PID != prev.PID:
		return "a new process"
	case s.Steps > prev.Steps:
		return "an optimizer step"
	case collectivesMoved(prev.Recorder, s.Recorder):
		return "a collective enqueued or completed"
	case !slices.Equal(s.Stack, prev.Stack):
		return "its stack moved"
	}
	return ""
}

// Last is the newest snapshot observed (ok false before any).
func (l *Life) Last() (Snapshot, bool) { return l.last, l.seen }

// collectivesMoved: a new entry, or one that retired since.
func collectivesMoved(a, b *Recorder) bool {
	if a == nil || b == nil {
		return a != b
	}
	newest := func(r *Recorder) (id int64, retired int) {
		id = -1
		for _, e := range r.Entries {
			id = max(id, e.RecordID)
			if e.Retired {
				retired++
			}
		}
		return id, retired
	}
	ai, ar := newest(a)
	bi, br := newest(b)
	return bi != ai || br != ar
}

// InFlight returns the rank's oldest collective that has not retired, from
// the snapshot's flight recorder (ok false: none, or no recorder).
func (s Snapshot) InFlight() (watchdog.Entry, bool) {
	if s.Recorder == nil {
		return watchdog.Entry{}, false
	}
	for _, e := range s.Recorder.Entries {
		if !e.Retired && !e.IsP2P {
			return e, true
		}
	}
	return watchdog.Entry{}, false
}

// Where says where the main thread is, from the stack alone: "collective"
// inside torch.distributed, "backward" inside autograd (where DDP's
// gradient all-reduce waits), else "" (the script's own code, a data
// loader, a sleep).
func (s Snapshot) Where() string {
	for _, f := range s.Stack {
		file := f.File
		switch {
		case strings.Contains(file, "/torch/distributed/"):
			return "collective"
		case strings.Contains(file, "/torch/autograd/"):
			return "backward"
		}
	}
	return ""
}

// Top returns the innermost n frames, innermost first, as "file:line in
// function ← ...".
// When none of them is the script's own code, the innermost frame that
// is follows ("... ← ... ← train.py:46 in batches"): a rank blocked in a data
// loader's queue is placed in the script, not only in the standard
// library.
func (s Snapshot) Top(n int) string {
	parts := make([]string, 0, n+1)
	own := false
	for _, f := range s.Stack[:min(n, len(s.Stack))] {
		parts = append(parts, f.String())
		own = own || f.Own()
	}
	if !own {
		for _, f := range s.Stack[min(n, len(s.Stack)):] {
			if f.Own() {
				parts = append(parts, "...", f.String())
				break
			}
		}
	}
	return strings.Join(parts, " ← ")
}

// Own reports whether the frame is in the user's code: not in Python's
// standard library or an installed package.
func (f Frame) Own() bool {
	return !strings.HasPrefix(f.File, "<") && !strings.Contains(f.File, "/lib/python3.") && !strings.Contains(f.File, "/lib64/python3.") &&
		!strings.Contains(f.File, "site-packages") && !strings.Contains(f.File, "dist-packages")
}

// Dump turns the snapshot's flight recorder into a rank's dump for
// watchdog.Analyze (ok false without one).
func (s Snapshot) Dump() (watchdog.Dump, bool) {
	if s.Recorder == nil || s.Rank == nil {
		return watchdog.Dump{}, false
	}
	return watchdog.Dump{
		Version: "probe", Rank: *s.Rank, WorldSize: s.WorldSize, Reason: "gorun's worker probe",
		TimeDumpedNs: s.TimeNs, PGConfig: s.Recorder.PGConfig, PGStatus: s.Recorder.PGStatus, Entries: s.Recorder.Entries,
	}, true
}

// StepAt is the number of optimizer steps the rank had finished at t,
// from the newest step times (ok false when t is before them all).
func (s Snapshot) StepAt(t time.Time) (int64, bool) {
	n := int64(len(s.StepTimesNs))
	first := s.Steps - n // steps before the oldest time kept
	if n == 0 || t.UnixNano() < s.StepTimesNs[0] {
		// Before the oldest time kept: known only when every step's
		// time is kept (none was done then).
		return 0, first == 0 && s.StepHook
	}
	for i, ts := range s.StepTimesNs {
		if ts > t.UnixNano() {
			return first + int64(i), true
		}
	}
	return s.Steps, true
}

// Trimmed returns the snapshot cut to what a verdict reads, to send to
// the other nodes: the innermost 16 frames, the newest 8 step times, and
// of the flight recorder the collectives not retired and the newest
// retired one of each group.
func (s Snapshot) Trimmed() Snapshot {
	const frames, steps = 16, 8
	out := s
	out.Stack = slices.Clone(s.Stack[:min(frames, len(s.Stack))])
	out.StepTimesNs = slices.Clone(s.StepTimesNs[max(0, len(s.StepTimesNs)-steps):])
	if s.Recorder == nil {
		return out
	}
	rec := *s.Recorder
	rec.Entries = nil
	newest := map[int]int{} // group: index of its newest retired entry
	for i, e := range s.Recorder.Entries {
		if e.Retired && !e.IsP2P {
			if j, ok := newest[e.PGID]; !ok || e.CollectiveSeqID > s.Recorder.Entries[j].CollectiveSeqID {
				newest[e.PGID] = i
			}
		}
	}
	for i, e := range s.Recorder.Entries {
		if !e.Retired || newest[e.PGID] == i && !e.IsP2P {
			rec.Entries = append(rec.Entries, e)
		}
	}
	out.Recorder = &rec
	return out
}
