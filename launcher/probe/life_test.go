package probe

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/watchdog"
)

func TestLifeObserve(t *testing.T) {
	base := Snapshot{PID: 7, TimeNs: 1, Steps: 3, Stack: []Frame{{"train.py", 7, "main"}},
		Recorder: &Recorder{Entries: []watchdog.Entry{{RecordID: 4, CollectiveSeqID: 5, Retired: false}}}}
	next := func(f func(*Snapshot)) Snapshot {
		s := base
		s.TimeNs = 2
		s.Stack = append([]Frame(nil), base.Stack...)
		s.Recorder = &Recorder{Entries: append([]watchdog.Entry(nil), base.Recorder.Entries...)}
		f(&s)
		return s
	}
	for _, tc := range []struct {
		name string
		snap Snapshot
		want string
	}{
		{"the same snapshot again", base, ""},
		{"a new snapshot, nothing moved", next(func(*Snapshot) {}), ""},
		{"a step", next(func(s *Snapshot) { s.Steps++ }), "an optimizer step"},
		{"a collective completed", next(func(s *Snapshot) { s.Recorder.Entries[0].Retired = true }), "a collective enqueued or completed"},
		{"a collective enqueued", next(func(s *Snapshot) {
			s.Recorder.Entries = append(s.Recorder.Entries, watchdog.Entry{RecordID: 5, CollectiveSeqID: 6})
		}), "a collective enqueued or completed"},
		{"the stack moved", next(func(s *Snapshot) { s.Stack[0].Line = 8 }), "its stack moved"},
		{"a new process", next(func(s *Snapshot) { s.PID = 8 }), "a new process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l Life
			if got := l.Observe(base); got != "its probe started" {
				t.Fatalf("first snapshot: %q", got)
			}
			if got := l.Observe(tc.snap); got != tc.want {
				t.Errorf("%q; want %q", got, tc.want)
			}
		})
	}
}

func TestStepAt(t *testing.T) {
	all := Snapshot{Steps: 2, StepTimesNs: []int64{100, 200}, StepHook: true} // every step's time kept
	if n, ok := all.StepAt(time.Unix(0, 50)); n != 0 || !ok {
		t.Errorf("before the first step: %d, %v; want 0, true", n, ok)
	}
	s := Snapshot{Steps: 10, StepTimesNs: []int64{100, 200, 300}} // steps 8, 9, 10 ended then
	for _, tc := range []struct {
		at   int64
		want int64
		ok   bool
	}{{50, 0, false}, {100, 8, true}, {250, 9, true}, {300, 10, true}, {999, 10, true}} {
		got, ok := s.StepAt(time.Unix(0, tc.at))
		if got != tc.want || ok != tc.ok {
			t.Errorf("StepAt(%d) = %d, %v; want %d, %v", tc.at, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReadRefusesWhatIsNotASnapshot(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"version":1,"pid":3,"stack":[["a.py",1,"f"]]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"stack":[["a.py","one","f"]]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, maxSnapshot+1); err != nil {
		t.Fatal(err)
	}
	if s, ok, err := Read(good); err != nil || !ok || s.PID != 3 || s.Stack[0].String() != "a.py:1 in f" {
		t.Errorf("good: %+v %v %v", s, ok, err)
	}
	if _, ok, err := Read(filepath.Join(dir, "missing.json")); err != nil || ok {
		t.Errorf("missing: %v %v; want no snapshot, no error", ok, err)
	}
	for path, want := range map[string]string{link: "symbolic link", bad: "stack frame line", big: "above 4 MiB"} {
		_, _, err := Read(path)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error about %q", filepath.Base(path), err, want)
		}
	}
}

// TestTrimmed: what goes to the other nodes keeps the collectives in
// flight and the newest retired one of each group, and survives JSON.
func TestTrimmed(t *testing.T) {
	rank := 1
	s := Snapshot{Rank: &rank, Stack: make([]Frame, 40), StepTimesNs: make([]int64, 30), Recorder: &Recorder{Entries: []watchdog.Entry{
		{PGID: 0, CollectiveSeqID: 1, Retired: true},
		{PGID: 0, CollectiveSeqID: 2, Retired: true},
		{PGID: 1, CollectiveSeqID: 1, Retired: true},
		{PGID: 0, CollectiveSeqID: 3},
		{PGID: 0, CollectiveSeqID: 0, IsP2P: true, Retired: true},
	}}}
	for i := range s.Stack {
		s.Stack[i] = Frame{File: "train.py", Line: i, Func: "f"}
	}
	got := s.Trimmed()
	var kept []string
	for _, e := range got.Recorder.Entries {
		kept = append(kept, fmt.Sprintf("%d#%d", e.PGID, e.CollectiveSeqID))
	}
	if strings.Join(kept, " ") != "0#2 1#1 0#3" || len(got.Stack) != 16 || len(got.StepTimesNs) != 8 || len(s.Recorder.Entries) != 5 {
		t.Errorf("kept %v, %d frames, %d step times (the original: %d entries); want 0#2 1#1 0#3, 16, 8 (5)", kept, len(got.Stack), len(got.StepTimesNs), len(s.Recorder.Entries))
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil || back.Top(1) != "train.py:0 in f" {
		t.Errorf("round trip: %v, top %q", err, back.Top(1))
	}
}

func TestTopFindsTheScript(t *testing.T) {
	lib := Frame{File: "/usr/lib/python3.11/selectors.py", Line: 415, Func: "select"}
	pkg := Frame{File: "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", Line: 1, Func: "_next_data"}
	own := Frame{File: "/work/train.py", Line: 46, Func: "batches"}
	for _, tt := range []struct {
		stack []Frame
		want  string
	}{
		{[]Frame{own, lib}, "/work/train.py:46 in batches ← /usr/lib/python3.11/selectors.py:415 in select"},
		{[]Frame{lib, lib, pkg, pkg, own}, "/usr/lib/python3.11/selectors.py:415 in select ← /usr/lib/python3.11/selectors.py:415 in select ← /venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:1 in _next_data ← ... ← /work/train.py:46 in batches"},
		{[]Frame{lib, lib, lib, lib}, "/usr/lib/python3.11/selectors.py:415 in select ← /usr/lib/python3.11/selectors.py:415 in select ← /usr/lib/python3.11/selectors.py:415 in select"},
	} {
		if got := (Snapshot{Stack: tt.stack}).Top(3); got != tt.want {
			t.Errorf("Top(3) = %q; want %q", got, tt.want)
		}
	}
}
