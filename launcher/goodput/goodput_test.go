package goodput

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/golden"
)

// gt0 is the start of the test timelines.
var gt0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at is gt0 plus s seconds.
func at(s float64) time.Time { return gt0.Add(time.Duration(s * float64(time.Second))) }

// ev builds an event at s seconds.
func ev(s float64, kind string, e Event) Event {
	e.Time, e.Kind = at(s), kind
	return e
}

// ended is an end event with progress from first to last (-1: none).
func ended(s float64, attempt int, how string, first, last float64) Event {
	e := ev(s, EventEnd, Event{Attempt: attempt, How: how, Reason: how + " reason"})
	if first >= 0 {
		e.FirstProgress, e.LastProgress, e.FirstStep, e.Step = at(first), at(last), 1, 100
	}
	return e
}

// goodputCase returns the case of goodputCases named name.
func goodputCase(t *testing.T, name string) struct {
	name     string
	events   []Event
	now      float64
	running  map[int]Progress
	want     map[string]float64
	failures int
} {
	t.Helper()
	for _, c := range goodputCases() {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no goodput case %q", name)
	panic("unreachable")
}

// checkpointed adds a checkpoint at s (after step) to an end event whose
// steps the probe counted.
func checkpointed(e Event, s float64, step int) Event {
	e.ProgressFrom, e.Checkpoint, e.CheckpointStep = "probe", at(s), step
	if step < 0 {
		e.ProgressFrom = "" // the probe counted no step (PyTorch 1.x)
	}
	return e
}

// checkSums fails unless the categories add up to the wall time and the
// per-attempt and per-failure figures add up to their categories.
func checkSums(t *testing.T, r Report) {
	t.Helper()
	var sum, productive, startup, lost float64
	for _, c := range goodputCategories() {
		s, ok := r.Seconds[c]
		if !ok {
			t.Errorf("category %s is missing from Seconds", c)
		}
		sum += s
	}
	if len(r.Seconds) != len(goodputCategories()) {
		t.Errorf("Seconds has %d keys, want %d: %v", len(r.Seconds), len(goodputCategories()), r.Seconds)
	}
	if want := r.End.Sub(r.Start).Seconds(); math.Abs(sum-want) > 1e-9*math.Max(want, 1) || r.WallSeconds != want {
		t.Errorf("categories sum to %v s, wall %v s (end-start %v s): a segment is dropped or counted twice", sum, r.WallSeconds, want)
	}
	for _, a := range r.Attempts {
		productive += a.ProductiveSeconds
		startup += a.StartupSeconds
	}
	for _, f := range r.Failures {
		lost += f.LostSeconds
	}
	for c, got := range map[string]float64{GoodputProductive: productive, GoodputStartup: startup, GoodputLost: lost} {
		if math.Abs(got-r.Seconds[c]) > 1e-9 {
			t.Errorf("attempts or failures give %s %v s, the category %v s", c, got, r.Seconds[c])
		}
	}
}

// goodputCases are timelines with their expected split (seconds; missing
// categories are 0).
func goodputCases() []struct {
	name     string
	events   []Event
	now      float64
	running  map[int]Progress
	want     map[string]float64
	failures int
} {
	start := ev(0, EventStart, Event{Node: "node0", RunID: "job"})
	spawn := func(s float64, attempt int) Event {
		return ev(s, EventSpawn, Event{Attempt: attempt, Round: attempt + 1, WorldSize: 16})
	}
	exit := func(s float64, code int) Event { return ev(s, EventExit, Event{Code: code}) }
	stop := func(s float64) Event { return ev(s, EventStopRequest, Event{Reason: "SIGTERM from the scheduler"}) }
	return []struct {
		name     string
		events   []Event
		now      float64
		running  map[int]Progress
		want     map[string]float64
		failures int
	}{
		{name: "success", now: 500,
			events: []Event{start, ev(0, EventRendezvous, Event{}), spawn(2, 0), ended(100, 0, EndSucceeded, 5, 99), exit(101, 0)},
			want:   map[string]float64{"rendezvous": 2, "startup": 3, "productive": 95, "teardown": 1}},
		{name: "failure and restart", failures: 1,
			events: []Event{start, spawn(2, 0), ended(50, 0, EndFailed, 5, 40), ev(51, EventRendezvous, Event{Round: 2}),
				spawn(60, 1), ended(200, 1, EndSucceeded, 65, 199), exit(201, 0)},
			want: map[string]float64{"rendezvous": 2, "startup": 8, "productive": 170, "lost": 20, "teardown": 1}},
		{name: "interrupted twice", failures: 2,
			events: []Event{start, spawn(1, 0), ended(10, 0, EndInterrupted, 2, 8), spawn(20, 1),
				ended(30, 1, EndFailed, 21, 29), spawn(40, 2), ended(50, 2, EndSucceeded, 41, 50), exit(50, 0)},
			want: map[string]float64{"rendezvous": 1, "startup": 3, "productive": 6 + 8 + 9, "lost": 12 + 11}},
		{name: "failure after a checkpoint, steps from the probe", failures: 1,
			events: []Event{start, spawn(2, 0), checkpointed(ended(50, 0, EndFailed, 5, 45), 30, 60), spawn(60, 1),
				ended(100, 1, EndSucceeded, 62, 100), exit(100, 0)},
			want: map[string]float64{"rendezvous": 2, "startup": 3 + 2, "productive": 25 + 38, "lost": 30}},
		// The save of the last step ends after that step: the time up to
		// it is kept, and the loss counts from the checkpoint.
		{name: "failure right after a checkpoint, saved after the last step", failures: 1,
			events: []Event{start, spawn(2, 0), checkpointed(ended(50, 0, EndFailed, 5, 40), 42, 60), spawn(60, 1),
				ended(100, 1, EndSucceeded, 62, 100), exit(100, 0)},
			want: map[string]float64{"rendezvous": 2, "startup": 3 + 2, "productive": 37 + 38, "lost": 18}},
		{name: "a node joins: a new round, the same attempt",
			events: []Event{start, spawn(2, 0), ended(20, 0, EndInterrupted, 3, 19), ev(20, EventSpawn, Event{Attempt: 0, Round: 2, WorldSize: 24}),
				ended(40, 0, EndSucceeded, 21, 40), exit(40, 0)},
			want: map[string]float64{"rendezvous": 2, "startup": 1 + 1, "productive": 16 + 19, "lost": 1}, failures: 1},
		{name: "failure after a checkpoint, no steps (PyTorch 1.x)", failures: 1,
			events: []Event{start, spawn(2, 0), checkpointed(ended(50, 0, EndFailed, -1, -1), 30, -1), spawn(60, 1),
				ended(100, 1, EndSucceeded, 62, 100), exit(100, 0)},
			want: map[string]float64{"rendezvous": 2, "startup": 2, "productive": 28 + 38, "lost": 30}},
		{name: "success without progress", now: 1,
			events: []Event{start, spawn(2, 0), ended(100, 0, EndSucceeded, -1, -1), exit(100, 0)},
			want:   map[string]float64{"rendezvous": 2, "productive": 98}},
		{name: "failure without progress", failures: 1,
			events: []Event{start, spawn(2, 0), ended(10, 0, EndFailed, -1, -1), spawn(20, 1),
				ended(30, 1, EndSucceeded, 22, 30), exit(31, 0)},
			want: map[string]float64{"rendezvous": 2, "lost": 18, "startup": 2, "productive": 8, "teardown": 1}},
		{name: "hot spare",
			events: []Event{start, ev(1, EventRendezvous, Event{Spare: true}), ev(30, EventRendezvous, Event{}), spawn(32, 0),
				ended(40, 0, EndSucceeded, 33, 40), exit(40, 0)},
			want: map[string]float64{"rendezvous": 3, "spare": 29, "startup": 1, "productive": 7}},
		{name: "stop request during an attempt",
			events: []Event{start, spawn(2, 0), stop(50), ended(55, 0, EndPreempted, 5, 54), exit(56, 143)},
			want:   map[string]float64{"rendezvous": 2, "startup": 3, "productive": 45, "preemption": 6}},
		{name: "stop request during startup",
			events: []Event{start, spawn(2, 0), stop(4), ended(6, 0, EndPreempted, 5, 5.5), exit(7, 143)},
			want:   map[string]float64{"rendezvous": 2, "startup": 2, "preemption": 3}},
		{name: "stop request while a failure costs time", failures: 1,
			events: []Event{start, spawn(2, 0), ended(50, 0, EndFailed, 5, 40), stop(55), exit(57, 143)},
			want:   map[string]float64{"rendezvous": 2, "startup": 3, "productive": 35, "lost": 15, "preemption": 2}},
		{name: "failure after the stop request",
			events: []Event{start, spawn(2, 0), stop(30), ended(40, 0, EndFailed, 5, 39), exit(41, 1)},
			want:   map[string]float64{"rendezvous": 2, "startup": 3, "productive": 25, "preemption": 11}},
		{name: "stop request before any spawn",
			events: []Event{start, ev(0, EventRendezvous, Event{}), stop(5), exit(6, 143)},
			want:   map[string]float64{"rendezvous": 5, "preemption": 1}},
		// A stop that ended the workers (they did not save): the steps
		// since the last checkpoint (else step) are lost, as after a
		// failure; from the stop request on, preemption.
		{name: "operator stop", failures: 1,
			events: []Event{start, spawn(2, 0), ended(50, 0, EndStopped, 5, 48), exit(51, 130)},
			want:   map[string]float64{"rendezvous": 2, "startup": 3, "productive": 43, "lost": 3}},
		{name: "operator stop without progress", failures: 1,
			events: []Event{start, spawn(2, 0), ended(50, 0, EndStopped, -1, -1), exit(51, 130)},
			want:   map[string]float64{"rendezvous": 2, "lost": 49}},
		{name: "stop of a script that does not save", failures: 1,
			events: []Event{start, spawn(2, 0), stop(45), checkpointed(ended(46, 0, EndStopped, 5, 44), 40, 70), exit(47, 143)},
			want:   map[string]float64{"rendezvous": 2, "startup": 3, "productive": 35, "lost": 5, "preemption": 2}},
		{name: "preempted without a stop request",
			events: []Event{start, spawn(2, 0), ended(50, 0, EndPreempted, 5, 48), exit(51, 143)},
			want:   map[string]float64{"rendezvous": 2, "startup": 3, "productive": 43, "preemption": 3}},
		{name: "running with progress", now: 60,
			events:  []Event{start, spawn(2, 0)},
			running: map[int]Progress{0: {Seen: true, FirstTime: at(5), Time: at(40), FirstStep: 0, Step: 70}},
			want:    map[string]float64{"rendezvous": 2, "startup": 3, "productive": 55}},
		{name: "running without progress", now: 60,
			events:  []Event{start, spawn(2, 0)},
			running: map[int]Progress{1: {Seen: true, FirstTime: at(5), Time: at(40)}}, // another attempt's
			want:    map[string]float64{"rendezvous": 2, "startup": 58}},
		{name: "still in rendezvous", now: 10,
			events: []Event{start, ev(0, EventRendezvous, Event{})},
			want:   map[string]float64{"rendezvous": 10}},
		{name: "now before the last event", now: -5,
			events: []Event{start, ev(3, EventRendezvous, Event{})},
			want:   map[string]float64{"rendezvous": 3}},
		{name: "agent killed after a failure", now: 100, failures: 1,
			events: []Event{start, spawn(2, 0), ended(50, 0, EndFailed, 5, 40)},
			want:   map[string]float64{"rendezvous": 2, "startup": 3, "productive": 35, "lost": 60}},
		{name: "exit without the attempt's end",
			events: []Event{start, spawn(2, 0), exit(30, 1)},
			want:   map[string]float64{"rendezvous": 2, "startup": 28}},
		{name: "progress outside the attempt is clamped", failures: 1,
			events: []Event{start, spawn(2, 0), ended(50, 0, EndFailed, 1, 70), spawn(60, 1),
				ended(70, 1, EndSucceeded, 61, 70), exit(70, 0)},
			want: map[string]float64{"rendezvous": 2, "productive": 48 + 9, "lost": 10, "startup": 1}},
		{name: "empty span", now: 0,
			events: []Event{start},
			want:   map[string]float64{}},
		{name: "membership change reruns the attempt", failures: 1,
			events: []Event{start, spawn(1, 0), ended(10, 0, EndInterrupted, 2, 8), spawn(20, 0),
				ended(50, 0, EndSucceeded, 21, 50), exit(50, 0)},
			want: map[string]float64{"rendezvous": 1, "startup": 2, "productive": 6 + 29, "lost": 12}},
	}
}

func TestGoodputComputeReport(t *testing.T) {
	for i, tt := range goodputCases() {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ComputeReport(tt.events, at(tt.now), tt.running)
			if err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
			checkSums(t, r)
			for _, c := range goodputCategories() {
				if got, want := r.Seconds[c], tt.want[c]; math.Abs(got-want) > 1e-9 {
					t.Errorf("case %d: %s = %v s, want %v s (all: %v)", i, c, got, want, r.Seconds)
				}
			}
			if len(r.Failures) != tt.failures {
				t.Errorf("case %d: %d failures, want %d: %+v", i, len(r.Failures), tt.failures, r.Failures)
			}
			exited := tt.events[len(tt.events)-1].Kind == EventExit
			if r.Running == exited || (r.ExitCode != nil) != exited {
				t.Errorf("case %d: running %v, exit code %v; want running %v", i, r.Running, r.ExitCode, !exited)
			}
			if want := r.Seconds[GoodputProductive] / r.WallSeconds; r.WallSeconds > 0 && math.Abs(r.EffectiveTrainingTimeRatio-want) > 1e-12 {
				t.Errorf("case %d: ETTR %v, want %v", i, r.EffectiveTrainingTimeRatio, want)
			}
		})
	}
}

// TestGoodputAttempts checks the per-attempt and per-failure details.
func TestGoodputAttempts(t *testing.T) {
	c := goodputCases()[1] // failure and restart
	r, err := ComputeReport(c.events, gt0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Restarts != 1 || len(r.Attempts) != 2 || r.RunID != "job" || r.Node != "node0" {
		t.Fatalf("restarts %d, %d attempts, run %q, node %q", r.Restarts, len(r.Attempts), r.RunID, r.Node)
	}
	f := r.Failures[0]
	if f.Attempt != 0 || f.How != EndFailed || !f.From.Equal(at(40)) || !f.To.Equal(at(60)) || f.LostSeconds != 20 {
		t.Errorf("failure %+v, want attempt 0 failed from 40 s to 60 s, 20 s lost", f)
	}
	a := r.Attempts[0]
	if !a.Measured || a.ProductiveSeconds != 35 || a.StartupSeconds != 3 || *a.FirstStep != 1 || *a.LastStep != 100 || a.WorldSize != 16 {
		t.Errorf("attempt 0: %+v", a)
	}
	if r, err := ComputeReport(goodputCase(t, "a node joins: a new round, the same attempt").events, gt0, nil); err != nil || r.Restarts != 0 || len(r.Attempts) != 2 {
		t.Errorf("a membership change: %d restarts, %d attempts, %v; want 0 restarts (the agent counts none), 2 attempts", r.Restarts, len(r.Attempts), err)
	}
	r, err = ComputeReport(goodputCase(t, "success without progress").events, gt0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := r.Attempts[0]; a.Measured || a.FirstStep != nil || a.LastStep != nil {
		t.Errorf("an attempt without progress: %+v, want measured false and no steps", a)
	}
	stopped := []Event{ev(0, EventStart, Event{}), ev(1, EventSpawn, Event{}), ev(5, EventStopRequest, Event{}),
		ended(6, 0, EndFailed, 2, 3), ev(7, EventSpawn, Event{Attempt: 1}), ended(9, 1, EndFailed, 8, 8), ev(10, EventExit, Event{})}
	if r, err = ComputeReport(stopped, gt0, nil); err != nil || len(r.Failures) != 1 || !r.Failures[0].To.Equal(at(5)) || r.Failures[0].LostSeconds != 2 {
		t.Errorf("a failure cut short by a stop request: %+v, %v; want one, to 5 s, 2 s lost", r.Failures, err)
	}
}

// TestGoodputTotalRejectsGapsAndOverlaps: total, which every report goes
// through, refuses segments that leave a gap or count time twice.
func TestGoodputTotalRejectsGapsAndOverlaps(t *testing.T) {
	seg := func(from, to float64, cat string) goodputSegment {
		return goodputSegment{at(from), at(to), cat, -1, -1}
	}
	for i, tt := range []struct {
		name string
		segs []goodputSegment
		ok   bool
	}{
		{"exact", []goodputSegment{seg(0, 4, GoodputRendezvous), seg(4, 10, GoodputProductive)}, true},
		{"gap", []goodputSegment{seg(0, 4, GoodputRendezvous), seg(5, 10, GoodputProductive)}, false},
		{"overlap", []goodputSegment{seg(0, 4, GoodputRendezvous), seg(3, 10, GoodputProductive)}, false},
		{"twice", []goodputSegment{seg(0, 4, GoodputRendezvous), seg(0, 4, GoodputRendezvous), seg(4, 10, GoodputLost)}, false},
		{"short", []goodputSegment{seg(0, 4, GoodputRendezvous)}, false},
	} {
		r := Report{Start: at(0), End: at(10), Seconds: map[string]float64{}}
		if err := r.total(tt.segs, nil); (err == nil) != tt.ok {
			t.Errorf("case %d (%s): error %v, want ok %v", i, tt.name, err, tt.ok)
		}
	}
}

// TestGoodputRandomTimelines: on random valid timelines the split always
// adds up.
func TestGoodputRandomTimelines(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	hows := []string{EndSucceeded, EndFailed, EndInterrupted, EndPreempted, EndStopped}
	for n := range 500 {
		now := 0.0
		tick := func() float64 { now += float64(rng.IntN(5000)) / 1000; return now }
		events := []Event{ev(0, EventStart, Event{})}
		for a := range rng.IntN(4) {
			if rng.IntN(3) == 0 {
				events = append(events, ev(tick(), EventRendezvous, Event{Spare: rng.IntN(2) == 0}))
			}
			if rng.IntN(6) == 0 {
				events = append(events, ev(tick(), EventStopRequest, Event{}))
			}
			spawned := tick()
			events = append(events, ev(spawned, EventSpawn, Event{Attempt: a}))
			first, last := spawned+float64(rng.IntN(3000)-1000)/1000, spawned+float64(rng.IntN(9000)-1000)/1000
			if rng.IntN(4) == 0 {
				first = -1
			}
			events = append(events, ended(tick()+1, a, hows[rng.IntN(len(hows))], first, last))
			now = events[len(events)-1].Time.Sub(gt0).Seconds()
		}
		if rng.IntN(2) == 0 {
			events = append(events, ev(tick(), EventExit, Event{}))
		}
		r, err := ComputeReport(events, at(tick()), nil)
		if err != nil {
			t.Fatalf("timeline %d: %v", n, err)
		}
		checkSums(t, r)
		if t.Failed() {
			t.Fatalf("timeline %d: %+v", n, events)
		}
	}
}

func TestGoodputErrors(t *testing.T) {
	start := ev(0, EventStart, Event{})
	for i, tt := range []struct {
		name   string
		events []Event
		want   string
	}{
		{"no events", nil, "no events"},
		{"out of order", []Event{start, ev(5, EventRendezvous, Event{}), ev(4, EventSpawn, Event{})}, "event 3 (\"spawn\" at 2026-03-01T12:00:04Z) is out of order"},
		{"end without spawn", []Event{start, ended(1, 0, EndFailed, -1, -1)}, "event 2 (\"end\" at 2026-03-01T12:00:01Z): attempt 0 ended without a \"spawn\" event"},
		{"unknown kind", []Event{start, ev(1, "launch", Event{})}, "event 2 (\"launch\" at 2026-03-01T12:00:01Z): unknown kind; want start,"},
		{"no start", []Event{ev(1, EventSpawn, Event{})}, "event 1 (\"spawn\" at 2026-03-01T12:00:01Z): a timeline starts with a \"start\" event"},
		{"second start", []Event{start, start}, "a second \"start\" event"},
		{"after exit", []Event{start, ev(1, EventExit, Event{}), ev(2, EventRendezvous, Event{})}, "event 3 (\"rendezvous\" at 2026-03-01T12:00:02Z) comes after the \"exit\" event"},
		{"unknown how", []Event{start, ev(1, EventSpawn, Event{}), ended(2, 0, "crashed", -1, -1)}, "how=\"crashed\"; want succeeded, failed"},
		{"spawn while running", []Event{start, ev(1, EventSpawn, Event{}), ev(2, EventSpawn, Event{Attempt: 1})}, "attempt 1 spawned while attempt 0 has not ended"},
		{"attempt numbers", []Event{start, ev(1, EventSpawn, Event{Attempt: -1})}, "attempt -1; want 0 or more"},
		{"wrong attempt ended", []Event{start, ev(1, EventSpawn, Event{Attempt: 1}), ended(2, 0, EndFailed, -1, -1)}, "attempt 0 ended, but attempt 1 is the one running"},
		{"no time", []Event{start, {Kind: EventSpawn}}, "event 2 (\"spawn\") has no time"},
	} {
		_, err := ComputeReport(tt.events, gt0, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("case %d (%s): error %v, want one containing %q", i, tt.name, err, tt.want)
		}
	}
}

// TestGoodputOutput compares the text, short and JSON forms with
// testdata/goodput (go test -update rewrites them).
func TestGoodputOutput(t *testing.T) {
	for i, c := range goodputCases() {
		switch c.name {
		case "failure and restart", "interrupted twice", "running with progress", "failure after a checkpoint, steps from the probe", "failure without progress",
			"failure after a checkpoint, no steps (PyTorch 1.x)":
		default:
			continue
		}
		r, err := ComputeReport(c.events, at(c.now), c.running)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		name := strings.ReplaceAll(c.name, " ", "_")
		var text, js bytes.Buffer
		if err := r.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		if err := r.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, name+".txt", text.String())
		golden.Check(t, name+".json", js.String())
		golden.Check(t, name+"_short.txt", r.Short()+"\n")
		if n := strings.Count(r.Short(), "\n") + 1; n > 4 {
			t.Errorf("case %d: Short has %d lines, want at most 4", i, n)
		}
	}
}
