package goodput

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gorun-dev/gorun/launcher/probe"
)

// EventsFile is the name of a node's timeline in its run folder
// (<log_dir>/<run_id>), one Event per line.
const EventsFile = "events.jsonl"

// maxEventLine bounds one line of an events file.
const maxEventLine = 64 << 10

// Kinds of Event.
const (
	EventStart       = "start"        // the agent began: Node, RunID
	EventRendezvous  = "rendezvous"   // a join of a round began: Round, Spare
	EventSpawn       = "spawn"        // an attempt's workers were started: Attempt, Round, WorldSize
	EventEnd         = "end"          // an attempt's workers all exited: Attempt, How, Reason, progress
	EventStopRequest = "stop_request" // a job-wide preemption or stop request was learned: Reason
	EventExit        = "exit"         // the agent ends: Code
	EventStraggler   = "straggler"    // the straggler watch named a rank, or saw it recover: Straggler
)

// How an attempt ended, Event.How of an EventEnd.
const (
	EndSucceeded   = "succeeded"
	EndFailed      = "failed"
	EndInterrupted = "interrupted" // a membership change or another node's failure ended the round
	EndPreempted   = "preempted"   // a stop request, after which every worker saved and exited 0
	EndStopped     = "stopped"     // a stop (a signal, a stop request's grace run out) that ended the workers
)

// Event is one entry of a node's timeline, one JSON line of events.jsonl.
type Event struct {
	Time      time.Time `json:"time"`
	Kind      string    `json:"event"` // one of the Event* constants
	Attempt   int       `json:"attempt,omitempty"`
	Round     int       `json:"round,omitempty"`
	WorldSize int       `json:"world_size,omitempty"`
	How       string    `json:"how,omitempty"` // for EventEnd: one of the End* constants
	Reason    string    `json:"reason,omitempty"`
	Code      int       `json:"code,omitempty"` // for EventExit
	// FirstProgress and LastProgress are an attempt's first and last
	// reported steps, for EventEnd (read from the workers' progress files
	// when the attempt ended); zero when none.
	FirstProgress time.Time `json:"first_progress,omitzero"`
	LastProgress  time.Time `json:"last_progress,omitzero"`
	// Step is the last step number seen, -1 or absent when none; FirstStep
	// the first. They are known only when LastProgress (FirstProgress) is
	// set.
	Step      int `json:"step,omitempty"`
	FirstStep int `json:"first_step,omitempty"`
	// ProgressFrom says where the steps came from, for EventEnd:
	// "progress file" (gorun's helpers), "probe" (the optimizer steps
	// gorun's probe counted in a script that knows nothing of gorun), or
	// "" (none: not measured).
	ProgressFrom string `json:"progress_from,omitempty"`
	// Checkpoint is when the attempt's last checkpoint was written (the
	// probe saw torch.save or torch.distributed.checkpoint.save return),
	// after CheckpointStep steps (-1: unknown), for EventEnd; zero when
	// none was seen.
	Checkpoint     time.Time `json:"checkpoint,omitzero"`
	CheckpointStep int       `json:"checkpoint_step,omitempty"`
	Node           string    `json:"node,omitempty"`   // host, for EventStart
	RunID          string    `json:"run_id,omitempty"` // for EventStart
	Spare          bool      `json:"spare,omitempty"`  // for EventRendezvous: this node waited as a hot spare
	// Straggler is what the straggler watch found, for EventStraggler.
	Straggler *StragglerEvent `json:"straggler,omitempty"`
}

// StragglerEvent is a rank the straggler watch named (probe.Straggler),
// or its recovery.
type StragglerEvent struct {
	Rank  int `json:"rank"`
	Group int `json:"group"`
	// Late of the last Window collectives found it last, LagSeconds
	// (median) after the next-latest rank.
	Late       int     `json:"late"`
	Window     int     `json:"window"`
	LagSeconds float64 `json:"lag_seconds"`
	// Since is the collective its lateness began at, SinceTime when; Step
	// the rank's optimizer steps done then (-1: unknown).
	Since     int64     `json:"since_collective"`
	SinceTime time.Time `json:"since"`
	Step      int64     `json:"step"`
	Recovered bool      `json:"recovered,omitempty"`
	// Node is the straggling node, "node 1 (host7)", when the job-wide
	// watch named a whole node (Rank is then -1).
	Node string `json:"node,omitempty"`
}

func NewStragglerEvent(s probe.Straggler, node string, recovered bool) *StragglerEvent {
	return &StragglerEvent{Rank: s.Rank, Group: s.Group, Late: s.Late, Window: s.Window, LagSeconds: s.Lag.Seconds(),
		Since: s.Since, SinceTime: s.SinceTime.Round(0), Step: s.Step, Recovered: recovered, Node: node}
}

// EventLog records a node's timeline: in memory, and appended to w as JSON
// lines when w is not nil. It is safe for concurrent use.
type EventLog struct {
	mu     sync.Mutex
	w      io.Writer
	events []Event
	err    error
}

// NewEventLog returns a log that appends to w, which may be nil.
func NewEventLog(w io.Writer) *EventLog { return &EventLog{w: w} }

// Record adds e to the timeline, with Time set to now when zero. Each
// event is written as one line in one write. A write error is kept for Err
// and stops further writes (a partly written line would otherwise sit in
// the middle of the file); the events are still kept in memory.
func (l *EventLog) Record(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.Round(0) // as read back from the file: no monotonic clock
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
	if l.w == nil || l.err != nil {
		return
	}
	line, err := json.Marshal(e)
	if err == nil {
		_, err = l.w.Write(append(line, '\n'))
	}
	if err != nil {
		l.err = fmt.Errorf("write %s: %w", EventsFile, err)
	}
}

// Events returns a copy of the timeline recorded so far.
func (l *EventLog) Events() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events...)
}

// Err returns the first write error, or nil.
func (l *EventLog) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// ReadEvents reads an events file. A last line without its newline that
// does not parse is skipped: an agent killed while writing it. Blank lines
// are skipped; any other line that is not an Event's JSON is an error
// naming its line number. Unknown fields are ignored.
func ReadEvents(r io.Reader) ([]Event, error) {
	br := bufio.NewReaderSize(r, maxEventLine)
	var events []Event
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("line %d is longer than %d KiB; want one JSON event a line", n, maxEventLine>>10)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			var e Event
			if jerr := json.Unmarshal(trimmed, &e); jerr != nil {
				if err != nil { // the last line, cut short
					break
				}
				return nil, fmt.Errorf("line %d is not a JSON event: %w", n, jerr)
			}
			events = append(events, e)
		}
		if err != nil {
			break
		}
	}
	return events, nil
}

// attemptSpan is an attempt: its spawn and, once it ended, its end.
type attemptSpan struct {
	spawn, end Event
	ended      bool
}

// parsedTimeline is a validated timeline.
type parsedTimeline struct {
	start, exit Event
	exited      bool
	stop        time.Time // the first stop request, zero without one
	rdzv        []Event
	attempts    []attemptSpan
	stragglers  []StragglerEvent
}

// parseTimeline checks the events' order and kinds.
func parseTimeline(events []Event) (parsedTimeline, error) {
	var t parsedTimeline
	if len(events) == 0 {
		return t, fmt.Errorf("no events: a timeline starts with a %q event", EventStart)
	}
	for i, e := range events {
		where := fmt.Sprintf("event %d (%q at %s)", i+1, e.Kind, e.Time.Format(time.RFC3339Nano))
		open := len(t.attempts) > 0 && !t.attempts[len(t.attempts)-1].ended
		switch {
		case e.Time.IsZero():
			return t, fmt.Errorf("event %d (%q) has no time", i+1, e.Kind)
		case i > 0 && e.Time.Before(events[i-1].Time):
			return t, fmt.Errorf("%s is out of order: before event %d at %s", where, i, events[i-1].Time.Format(time.RFC3339Nano))
		case i == 0 && e.Kind != EventStart:
			return t, fmt.Errorf("%s: a timeline starts with a %q event", where, EventStart)
		case i > 0 && e.Kind == EventStart:
			return t, fmt.Errorf("%s: a second %q event; a timeline has one", where, EventStart)
		case t.exited:
			return t, fmt.Errorf("%s comes after the %q event, which ends a timeline", where, EventExit)
		}
		switch e.Kind {
		case EventStart:
			t.start = e
		case EventRendezvous:
			t.rdzv = append(t.rdzv, e)
		case EventSpawn:
			// An attempt's number may come again: a membership change
			// reruns it in a new round, and a store that restarted empty
			// counts from 0 again. The times order the spans.
			if n := len(t.attempts); open {
				return t, fmt.Errorf("%s: attempt %d spawned while attempt %d has not ended", where, e.Attempt, t.attempts[n-1].spawn.Attempt)
			} else if e.Attempt < 0 {
				return t, fmt.Errorf("%s: attempt %d; want 0 or more", where, e.Attempt)
			}
			t.attempts = append(t.attempts, attemptSpan{spawn: e})
		case EventEnd:
			if !open {
				return t, fmt.Errorf("%s: attempt %d ended without a %q event", where, e.Attempt, EventSpawn)
			}
			a := &t.attempts[len(t.attempts)-1]
			if e.Attempt != a.spawn.Attempt {
				return t, fmt.Errorf("%s: attempt %d ended, but attempt %d is the one running", where, e.Attempt, a.spawn.Attempt)
			}
			switch e.How {
			case EndSucceeded, EndFailed, EndInterrupted, EndPreempted, EndStopped:
			default:
				return t, fmt.Errorf("%s: how=%q; want %s, %s, %s, %s or %s", where, e.How,
					EndSucceeded, EndFailed, EndInterrupted, EndPreempted, EndStopped)
			}
			a.end, a.ended = e, true
		case EventStopRequest:
			if t.stop.IsZero() {
				t.stop = e.Time
			}
		case EventExit:
			t.exit, t.exited = e, true
		case EventStraggler:
			if e.Straggler == nil {
				return t, fmt.Errorf("%s: a straggler event without its straggler", where)
			}
			t.stragglers = append(t.stragglers, *e.Straggler)
		default:
			return t, fmt.Errorf("%s: unknown kind; want %s, %s, %s, %s, %s, %s or %s", where,
				EventStart, EventRendezvous, EventSpawn, EventEnd, EventStopRequest, EventExit, EventStraggler)
		}
	}
	return t, nil
}
