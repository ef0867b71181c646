package goodput

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// flakyEventWriter fails every write after the first n.
type flakyEventWriter struct {
	n      int
	writes int
	buf    bytes.Buffer
}

func (w *flakyEventWriter) Write(b []byte) (int, error) {
	w.writes++
	if w.writes > w.n {
		return 0, errors.New("disk full")
	}
	return w.buf.Write(b)
}

func TestEventLogRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	l := NewEventLog(&buf)
	before := time.Now()
	l.Record(Event{Kind: EventStart, Node: "node0", RunID: "job"})
	l.Record(Event{Time: at(1), Kind: EventSpawn, Attempt: 0, Round: 1, WorldSize: 8})
	l.Record(Event{Time: at(2), Kind: EventEnd, How: EndSucceeded, FirstProgress: at(1.5), LastProgress: at(2), Step: 9, FirstStep: 1})
	l.Record(Event{Time: at(3), Kind: EventExit})
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	mem := l.Events()
	if len(mem) != 4 || mem[0].Time.Before(before) || mem[0].Time.After(time.Now()) {
		t.Fatalf("events %+v: want 4, the first stamped now", mem)
	}
	if lines := strings.Count(buf.String(), "\n"); lines != 4 {
		t.Errorf("%d lines written, want 4:\n%s", lines, buf.String())
	}
	read, err := ReadEvents(&buf)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(mem)
	b, _ := json.Marshal(read)
	if !bytes.Equal(a, b) {
		t.Errorf("read back\n%s\nwant\n%s", b, a)
	}
	for i := range mem {
		if !mem[i].Time.Equal(read[i].Time) {
			t.Errorf("event %d: time %v read back as %v", i, mem[i].Time, read[i].Time)
		}
	}
	mem[0].Kind = "changed"
	if l.Events()[0].Kind != EventStart {
		t.Error("Events does not return a copy")
	}
}

func TestEventLogWriteError(t *testing.T) {
	w := &flakyEventWriter{n: 1}
	l := NewEventLog(w)
	for i := range 3 {
		l.Record(Event{Kind: EventRendezvous, Round: i + 1})
	}
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), EventsFile) {
		t.Errorf("Err() = %v, want the write error naming %s", err, EventsFile)
	}
	if len(l.Events()) != 3 || w.writes != 2 {
		t.Errorf("%d events kept, %d writes tried; want 3 kept and no write after the failed one", len(l.Events()), w.writes)
	}
	if NewEventLog(nil).Err() != nil {
		t.Error("a log without a writer has an error")
	}
}

// TestEventLogConcurrent records from several goroutines (run with -race):
// every event is kept and written on a line of its own.
func TestEventLogConcurrent(t *testing.T) {
	var buf bytes.Buffer
	l := NewEventLog(&buf)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				l.Record(Event{Kind: EventRendezvous, Round: g*100 + i})
				_ = l.Events()
			}
		})
	}
	wg.Wait()
	read, err := ReadEvents(&buf)
	if err != nil || len(read) != 400 || len(l.Events()) != 400 {
		t.Fatalf("read %d events (%v), kept %d; want 400", len(read), err, len(l.Events()))
	}
	for i, e := range l.Events() {
		if e.Round != read[i].Round {
			t.Fatalf("event %d: round %d in memory, %d in the file: the orders differ", i, e.Round, read[i].Round)
		}
	}
}

func TestEventLogReadEvents(t *testing.T) {
	const good = `{"time":"2026-03-01T12:00:00Z","event":"start","node":"n"}` + "\n"
	long := `{"time":"2026-03-01T12:00:00Z","event":"start","reason":"` + strings.Repeat("x", 70<<10) + `"}` + "\n"
	for i, tt := range []struct {
		name, in string
		n        int
		err      string
	}{
		{"empty", "", 0, ""},
		{"one", good, 1, ""},
		{"no final newline", strings.TrimSuffix(good, "\n"), 1, ""},
		{"cut short", good + `{"time":"2026-03-01T12:00:01Z","ev`, 1, ""},
		{"blank lines", "\n" + good + "  \n" + good, 2, ""},
		{"unknown field", `{"time":"2026-03-01T12:00:00Z","event":"start","color":"red"}` + "\n", 1, ""},
		{"bad middle line", good + "not json\n" + good, 0, "line 2 is not a JSON event"},
		{"bad last line with its newline", good + `{"time":1}` + "\n", 0, "line 2 is not a JSON event"},
		{"too long", good + long, 0, "line 2 is longer than 64 KiB"},
	} {
		got, err := ReadEvents(strings.NewReader(tt.in))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("case %d (%s): %v", i, tt.name, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("case %d (%s): error %v, want %q", i, tt.name, err, tt.err)
		case len(got) != tt.n:
			t.Errorf("case %d (%s): %d events, want %d", i, tt.name, len(got), tt.n)
		}
	}
}
