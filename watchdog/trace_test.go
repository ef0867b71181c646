package watchdog

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/golden"
)

// call is one collective a rank made: op, elements, and how far it got.
type call struct {
	op    string
	n     int64
	state string
}

// dumpOf records calls on a rank's recorder as the comm package would.
func dumpOf(rank, world int, calls []call) Dump {
	rec := NewRecorder(100)
	rec.AddGroup(0, "0", "world", []int{0, 1, 2})
	t := time.Unix(1000, 0)
	for i, c := range calls {
		id := rec.Record(Entry{CollectiveSeqID: int64(i), ProfilingName: "gorun:" + c.op, InputSizes: [][]int64{{c.n}}, InputDtypes: []string{"float32"}}, t)
		switch c.state {
		case StateStarted:
			rec.Started(id, t)
		case StateCompleted:
			rec.Started(id, t)
			rec.Completed(id, t.Add(time.Millisecond))
		}
	}
	return rec.Dump(rank, world, "test", t)
}

// live marks dumps as a running job's snapshot, as a SIGUSR1 request
// does.
func live(ds []Dump) []Dump {
	for i := range ds {
		ds[i].Reason = "gorun request " + LiveSnapshotID + "1796300000"
	}
	return ds
}

func TestTraceVerdicts(t *testing.T) {
	done := func(op string, n int64) call { return call{op, n, StateCompleted} }
	for _, c := range []struct {
		name  string
		dumps []Dump
	}{
		// Ranks 0 and 2 wait in all_reduce #2; rank 1 never called it.
		{"hang", []Dump{
			dumpOf(0, 3, []call{done("broadcast", 4), done("all_reduce", 8), {"all_reduce", 8, StateStarted}, {"all_reduce", 8, StateScheduled}}),
			dumpOf(1, 3, []call{done("broadcast", 4), done("all_reduce", 8)}),
			dumpOf(2, 3, []call{done("broadcast", 4), done("all_reduce", 8), {"all_reduce", 8, StateStarted}}),
		}},
		// Rank 2 all-reduces 16 elements where the others reduce 8.
		{"desync", []Dump{
			dumpOf(0, 3, []call{done("all_reduce", 8), {"all_reduce", 8, StateStarted}}),
			dumpOf(1, 3, []call{done("all_reduce", 8), {"all_reduce", 8, StateStarted}}),
			dumpOf(2, 3, []call{done("all_reduce", 8), {"all_reduce", 16, StateStarted}}),
		}},
		{"clean", []Dump{
			dumpOf(0, 2, []call{done("all_gather", 2), done("barrier", 0)}),
			dumpOf(1, 2, []call{done("all_gather", 2), done("barrier", 0)}),
		}},
		// A running job's snapshot (SIGUSR1): rank 1 had not reached the
		// all_reduce the others were in; said to be in flight, not hung.
		{"live", live([]Dump{
			dumpOf(0, 2, []call{done("broadcast", 4), {"all_reduce", 8, StateStarted}}),
			dumpOf(1, 2, []call{done("broadcast", 4)}),
		})},
		// Rank 1 left no dump; rank 0's collective never started.
		{"missing", []Dump{
			dumpOf(0, 2, []call{done("all_gather", 2), {"all_reduce", 4, StateScheduled}}),
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			golden.Check(t, "trace_"+c.name+".txt", Analyze(c.dumps).Text())
		})
	}
}

func TestTraceReadsADirectory(t *testing.T) {
	dir := t.TempDir()
	if _, err := AnalyzeDir(dir); err == nil {
		t.Error("an empty directory gave a verdict")
	}
	for r := range 2 {
		if _, err := WriteDump(dir, dumpOf(r, 2, []call{{"all_reduce", 4, StateCompleted}})); err != nil {
			t.Fatal(err)
		}
	}
	v, err := AnalyzeDir(dir)
	if err != nil || len(v.Ranks) != 2 || v.Groups[0].Stuck != nil {
		t.Errorf("%+v, %v", v, err)
	}
	if err := os.WriteFile(filepath.Join(dir, DumpFileName(2)), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := AnalyzeDir(dir); err == nil {
		t.Error("a broken dump was accepted")
	}
}

// Trim keeps, per group, the last completed collective and what came
// after: enough for the same verdict.
func TestTrimKeepsTheVerdict(t *testing.T) {
	done := call{"all_reduce", 8, StateCompleted}
	full := []Dump{
		dumpOf(0, 2, []call{done, done, done, {"all_reduce", 8, StateStarted}}),
		dumpOf(1, 2, []call{done, done, done}),
	}
	trimmed := []Dump{Trim(full[0]), Trim(full[1])}
	if n := len(trimmed[0].Entries); n != 2 {
		t.Errorf("rank 0 kept %d entries; want the last completed and the started one", n)
	}
	if got, want := Analyze(trimmed).Text(), Analyze(full).Text(); got != want {
		t.Errorf("trimmed verdict:\n%s\nfull:\n%s", got, want)
	}
}

func TestRankRuns(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{1}, "1"},
		{[]int{1, 2}, "1, 2"},
		{[]int{0, 1, 2}, "0-2"},
		{[]int{0, 2, 3, 4, 5, 9, 10}, "0, 2-5, 9, 10"},
	} {
		if got := rankRuns(tc.in); got != tc.want {
			t.Errorf("rankRuns(%v) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
