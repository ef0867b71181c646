package goodput

import (
	"fmt"
	"time"
)

// Categories of a Report's wall time: the keys of Report.Seconds.
const (
	GoodputRendezvous = "rendezvous" // joining a round before the first attempt
	GoodputSpare      = "spare"      // waiting as a hot spare
	GoodputStartup    = "startup"    // from a spawn to the workers' first reported step
	GoodputProductive = "productive" // from the first to the last reported step
	GoodputLost       = "lost"       // from a failed or stopped attempt's last checkpoint (else step) to the next spawn or the stop
	GoodputPreemption = "preemption" // from a stop request (or a preempted attempt's last step) on
	GoodputTeardown   = "teardown"   // after the last success
)

// goodputCategories lists the categories in the order reports show them.
func goodputCategories() []string {
	return []string{GoodputRendezvous, GoodputSpare, GoodputStartup, GoodputProductive,
		GoodputLost, GoodputPreemption, GoodputTeardown}
}

// Report says where a node's wall time went. Its Seconds add up to
// WallSeconds.
type Report struct {
	RunID string    `json:"run_id"`
	Node  string    `json:"node"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Running is true when the timeline has no exit event: the job runs
	// still (or the agent was killed), and End is the time asked about.
	Running     bool    `json:"running"`
	ExitCode    *int    `json:"exit_code,omitempty"`
	WallSeconds float64 `json:"wall_seconds"`
	// Seconds holds every Goodput* category, 0 included.
	Seconds map[string]float64 `json:"seconds"`
	// EffectiveTrainingTimeRatio (ETTR) is productive over wall time.
	EffectiveTrainingTimeRatio float64         `json:"effective_training_time_ratio"`
	Attempts                   []AttemptReport `json:"attempts"`
	Failures                   []FailureLoss   `json:"failures"`
	// Restarts is the number of failure restarts (the last attempt's
	// number); rounds a membership change started are not counted.
	Restarts int `json:"restarts"`
	// Stragglers are the ranks the straggler watch named, and their
	// recoveries, in order.
	Stragglers []StragglerEvent `json:"stragglers,omitempty"`
}

// AttemptReport is one attempt of a Report.
type AttemptReport struct {
	Attempt   int       `json:"attempt"`
	Round     int       `json:"round"`
	WorldSize int       `json:"world_size"`
	Spawned   time.Time `json:"spawned"`
	Ended     time.Time `json:"ended,omitzero"` // zero while it runs
	// How is an End* constant, "running", or "unfinished" when the agent
	// exited without the attempt's end.
	How    string `json:"how"`
	Reason string `json:"reason,omitempty"`
	// Measured is false when the workers reported no step: startup and
	// productive time are then unknown apart.
	Measured          bool    `json:"measured"`
	FirstStep         *int    `json:"first_step,omitempty"`
	LastStep          *int    `json:"last_step,omitempty"`
	StartupSeconds    float64 `json:"startup_seconds"`
	ProductiveSeconds float64 `json:"productive_seconds"`
	// ProgressFrom says where its steps came from ("progress file",
	// "probe"; "" when not measured).
	ProgressFrom string `json:"progress_from,omitempty"`
	// Checkpoint is when its last checkpoint was seen written, after
	// CheckpointStep steps (zero, nil: none seen).
	Checkpoint     time.Time `json:"checkpoint,omitzero"`
	CheckpointStep *int      `json:"checkpoint_step,omitempty"`
}

// FailureLoss is the time a failed or interrupted attempt cost: from its
// last reported step (its spawn when it reported none) to the next spawn,
// the report's end, or a stop request, whichever comes first.
type FailureLoss struct {
	Attempt int `json:"attempt"`
	// Since says where the loss starts: "checkpoint" (the attempt's last
	// checkpoint: the steps after it are redone), "step" (its last step:
	// no checkpoint seen, so the steps since the last one gorun did not
	// see are lost too), or "spawn" (no step measured).
	Since       string    `json:"since"`
	How         string    `json:"how"`
	Reason      string    `json:"reason,omitempty"`
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
	LostSeconds float64   `json:"lost_seconds"`
}

// goodputSegment is a stretch of the timeline in one category, charged to an
// attempt and a failure (indexes, -1 for none).
type goodputSegment struct {
	from, to         time.Time
	cat              string
	attempt, failure int
}

// goodputTimeline lays segments end to end from a cursor, so that they cover the
// report's span once by construction.
type goodputTimeline struct {
	cursor time.Time
	segs   []goodputSegment
	// next is the first rendezvous event waitFor has not passed: the
	// events are in time order and the cursor only moves on, so the
	// whole report is linear in the events.
	next int
}

// add charges [cursor, to) to cat and moves the cursor to to; a to before
// the cursor adds nothing.
func (tl *goodputTimeline) add(to time.Time, cat string, attempt, failure int) {
	if !to.After(tl.cursor) {
		return
	}
	tl.segs = append(tl.segs, goodputSegment{tl.cursor, to, cat, attempt, failure})
	tl.cursor = to
}

// waitFor charges [cursor, to) to rendezvous, and to spare from each
// rendezvous event with Spare until the next rendezvous event or to.
func (tl *goodputTimeline) waitFor(to time.Time, rdzv []Event) {
	cat := GoodputRendezvous
	for tl.next < len(rdzv) && rdzv[tl.next].Time.Before(tl.cursor) {
		tl.next++
	}
	for ; tl.next < len(rdzv) && rdzv[tl.next].Time.Before(to); tl.next++ {
		e := rdzv[tl.next]
		tl.add(e.Time, cat, -1, -1)
		cat = GoodputRendezvous
		if e.Spare {
			cat = GoodputSpare
		}
	}
	tl.add(to, cat, -1, -1)
}

// clampGoodputTime returns t moved into [lo, hi].
func clampGoodputTime(t, lo, hi time.Time) time.Time {
	if t.Before(lo) {
		return lo
	}
	if t.After(hi) {
		return hi
	}
	return t
}

// ComputeReport splits a node's wall time, from its start event to its
// exit event (or now, while it runs), into the Goodput* categories. running
// gives the progress of an attempt that has no end event (read from its
// workers' progress files); it may be nil. The rules:
//
//   - until the first spawn: rendezvous, or spare from a rendezvous event
//     with Spare on;
//   - an attempt: startup until its first reported step, then productive
//     until its last (a success: until its end; no step at all: the whole
//     success is productive, and Measured false); a running attempt is
//     productive from its first step until now;
//   - after a failed, interrupted or stopped attempt's last checkpoint,
//     else its last step (its spawn without steps), until the next spawn:
//     lost, charged to one FailureLoss (a stopped attempt's workers did
//     not save: they were ended, not preempted);
//   - after the last success: teardown; after a preempted attempt's last
//     step (its workers saved and exited 0): preemption;
//   - from the first stop request on, everything is preemption.
//
// It returns an error naming the event when the events are out of order,
// an end has no spawn, or a kind is unknown.
func ComputeReport(events []Event, now time.Time, running map[int]Progress) (Report, error) {
	t, err := parseTimeline(events)
	if err != nil {
		return Report{}, err
	}
	start, end := t.start.Time, now.Round(0)
	if t.exited {
		end = t.exit.Time
	} else if last := events[len(events)-1].Time; end.Before(last) {
		end = last
	}
	r := Report{RunID: t.start.RunID, Node: t.start.Node, Start: start, End: end, Running: !t.exited,
		Seconds: map[string]float64{}, Attempts: []AttemptReport{}, Failures: []FailureLoss{}}
	if t.exited {
		code := t.exit.Code
		r.ExitCode = &code
	}
	// Restarts counts failure restarts, as the agent does: an elastic
	// round that a membership change (a node joining or lost) started
	// runs the same attempt number again, and is not one.
	if n := len(t.attempts); n > 0 {
		r.Restarts = t.attempts[n-1].spawn.Attempt
	}
	r.Stragglers = t.stragglers
	tl := &goodputTimeline{cursor: start}
	var causes []FailureLoss
	for i, a := range t.attempts {
		if i == 0 {
			tl.waitFor(a.spawn.Time, t.rdzv)
		}
		next := end
		if i+1 < len(t.attempts) {
			next = t.attempts[i+1].spawn.Time
		}
		ar := AttemptReport{Attempt: a.spawn.Attempt, Round: a.spawn.Round, WorldSize: a.spawn.WorldSize,
			Spawned: a.spawn.Time, How: "running"}
		s, e := a.spawn.Time, end
		var first, last time.Time
		var firstStep, lastStep int
		switch p, ok := running[a.spawn.Attempt]; {
		case a.ended:
			e, ar.Ended, ar.How, ar.Reason = a.end.Time, a.end.Time, a.end.How, a.end.Reason
			first, last, firstStep, lastStep = a.end.FirstProgress, a.end.LastProgress, a.end.FirstStep, a.end.Step
			ar.ProgressFrom, ar.Checkpoint = a.end.ProgressFrom, a.end.Checkpoint
			if !a.end.Checkpoint.IsZero() && a.end.CheckpointStep >= 0 {
				step := a.end.CheckpointStep
				ar.CheckpointStep = &step
			}
		case ok && p.Seen:
			first, last, firstStep, lastStep = p.FirstTime, p.Time, p.FirstStep, p.Step
		}
		if !a.ended && t.exited {
			ar.How = "unfinished"
		}
		if ar.Measured = !first.IsZero(); ar.Measured {
			first = clampGoodputTime(first, s, e)
			if last.IsZero() {
				last = first
			}
			last = clampGoodputTime(last, first, e)
			if firstStep >= 0 {
				ar.FirstStep = &firstStep
			}
			if lastStep >= 0 {
				ar.LastStep = &lastStep
			}
		}
		if ar.Measured {
			tl.add(first, GoodputStartup, i, -1)
		}
		switch ar.How {
		case EndSucceeded:
			tl.add(e, GoodputProductive, i, -1)
			if i+1 == len(t.attempts) {
				tl.add(end, GoodputTeardown, -1, -1)
			} else {
				tl.waitFor(next, t.rdzv)
			}
		case EndFailed, EndInterrupted, EndStopped:
			// A stopped attempt's workers did not save at the stop (those
			// that did exit 0: preempted): what came after the last
			// checkpoint is redone on resume, as after a failure. Its
			// time from the stop request on is preemption
			// (chargePreemption).
			upTo, since := last, "step"
			switch {
			case !ar.Checkpoint.IsZero() && !ar.Measured:
				// No steps, but a checkpoint: what came before it is kept
				// (its startup counted as productive, as for a success
				// without steps).
				upTo, since = clampGoodputTime(ar.Checkpoint, s, e), "checkpoint"
			case !ar.Measured:
				since = "spawn"
			case !ar.Checkpoint.IsZero():
				// A checkpoint saved after the last step (its save ends the
				// step) keeps that step: the time up to it is productive.
				upTo, since = clampGoodputTime(ar.Checkpoint, first, e), "checkpoint"
			}
			tl.add(upTo, GoodputProductive, i, -1)
			from := tl.cursor
			causes = append(causes, FailureLoss{Attempt: ar.Attempt, Since: since, How: ar.How, Reason: ar.Reason, From: from, To: next})
			tl.add(next, GoodputLost, i, len(causes)-1)
		case EndPreempted:
			tl.add(last, GoodputProductive, i, -1)
			tl.add(next, GoodputPreemption, i, -1)
		default: // running or unfinished
			if ar.Measured {
				tl.add(end, GoodputProductive, i, -1)
			} else {
				tl.add(end, GoodputStartup, i, -1)
			}
		}
		r.Attempts = append(r.Attempts, ar)
	}
	if len(t.attempts) == 0 {
		tl.waitFor(end, t.rdzv)
	}
	segs := chargePreemption(tl.segs, t.stop)
	return r, r.total(segs, causes)
}

// chargePreemption charges everything from stop on to preemption, splitting the
// segment that holds it; a zero stop changes nothing.
func chargePreemption(segs []goodputSegment, stop time.Time) []goodputSegment {
	if stop.IsZero() {
		return segs
	}
	out := make([]goodputSegment, 0, len(segs)+1)
	for _, s := range segs {
		if s.from.Before(stop) && s.to.After(stop) {
			out = append(out, goodputSegment{s.from, stop, s.cat, s.attempt, s.failure})
			s.from = stop
		}
		if !s.from.Before(stop) {
			s = goodputSegment{s.from, s.to, GoodputPreemption, -1, -1}
		}
		out = append(out, s)
	}
	return out
}

// total fills the report's sums from segs. It sums in integer
// nanoseconds, so the categories add up to the wall time exactly; a gap or
// overlap is a bug it reports. A failure that cost no time (its loss went
// to preemption) is left out.
func (r *Report) total(segs []goodputSegment, causes []FailureLoss) error {
	sums := map[string]time.Duration{}
	startup := make([]time.Duration, len(r.Attempts))
	productive := make([]time.Duration, len(r.Attempts))
	lost := make([]time.Duration, len(causes))
	lastLost := make([]time.Time, len(causes))
	cursor := r.Start
	for _, s := range segs {
		if !s.from.Equal(cursor) {
			return fmt.Errorf("goodput: internal error: segment %s from %s does not follow on %s", s.cat, s.from, cursor)
		}
		cursor = s.to
		d := s.to.Sub(s.from)
		sums[s.cat] += d
		switch {
		case s.cat == GoodputStartup && s.attempt >= 0:
			startup[s.attempt] += d
		case s.cat == GoodputProductive && s.attempt >= 0:
			productive[s.attempt] += d
		case s.cat == GoodputLost && s.failure >= 0:
			lost[s.failure] += d
			lastLost[s.failure] = s.to
		}
	}
	wall := r.End.Sub(r.Start)
	var sum time.Duration
	for _, c := range goodputCategories() {
		sum += sums[c]
		r.Seconds[c] = sums[c].Seconds()
	}
	if !cursor.Equal(r.End) || sum != wall {
		return fmt.Errorf("goodput: internal error: categories sum to %s, wall time is %s", sum, wall)
	}
	r.WallSeconds = wall.Seconds()
	if wall > 0 {
		r.EffectiveTrainingTimeRatio = float64(sums[GoodputProductive]) / float64(wall)
	}
	for i := range r.Attempts {
		r.Attempts[i].StartupSeconds = startup[i].Seconds()
		r.Attempts[i].ProductiveSeconds = productive[i].Seconds()
	}
	for i, f := range causes {
		if lost[i] > 0 {
			f.To, f.LostSeconds = lastLost[i], lost[i].Seconds()
			r.Failures = append(r.Failures, f)
		}
	}
	return nil
}
