package probe

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/watchdog"
)

// readCase reads testdata/<name>: the snapshots and flight-recorder dumps
// of three ranks of tests/hangs/train_faults.py, written by the real
// probe under PyTorch 2.15 (1.13 for sleep113) when gorun judged the job
// hung.
func readCase(t *testing.T, name string) ([]Rank, []watchdog.Dump) {
	t.Helper()
	var ranks []Rank
	for r := range 3 {
		s, ok, err := Read(filepath.Join("testdata", name, "snapshot_"+string(rune('0'+r))+".json"))
		if err != nil || !ok {
			t.Fatalf("%s rank %d: %v (found: %v)", name, r, err, ok)
		}
		ranks = append(ranks, Rank{Rank: r, Snapshot: &s})
	}
	dumps, _ := watchdog.ReadDumps(filepath.Join("testdata", name))
	return ranks, dumps
}

func TestJudgeRealHangs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fullDumps bool // the dumps written on request, else the snapshots' newest entries
		root      []int
		lines     []string
	}{
		{"sleep", true, []int{1}, []string{"rank 1 never entered all_reduce #", "(ranks 0, 2 wait in it)", "rank 1 is outside any collective, at ", "train_faults.py:77 in main"}},
		{"sleep", false, []int{1}, []string{"rank 1 never entered all_reduce #"}},
		{"desync", true, []int{1}, []string{"desync at collective #", "rank 1 called broadcast", "where ranks 0, 2 called all_reduce", "rank 1 is in a collective, at "}},
		{"desync", false, []int{1}, []string{"rank 1 called broadcast"}},
		{"dataloader", true, []int{1}, []string{"rank 1 never entered all_reduce #", "in batches"}},
		// PyTorch 1.13: no flight recorder, the stacks alone.
		{"sleep113", false, []int{1}, []string{"rank 1 is outside any collective, at ", "ranks 0, 2 wait in torch.distributed or in backward"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ranks, dumps := readCase(t, tc.name)
			if !tc.fullDumps {
				dumps = nil
			}
			v := Judge(ranks, dumps)
			if !slices.Equal(v.Root, tc.root) {
				t.Errorf("root %v; want %v\n%s", v.Root, tc.root, strings.Join(v.Lines, "\n"))
			}
			text := strings.Join(v.Lines, "\n")
			for _, want := range tc.lines {
				if !strings.Contains(text, want) {
					t.Errorf("verdict lacks %q:\n%s", want, text)
				}
			}
		})
	}
}

func TestJudgeWithoutEvidence(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	inColl := &Snapshot{Stack: []Frame{{"/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 4181, "all_reduce"}, {"train.py", 9, "main"}}}
	asleep := &Snapshot{Stack: []Frame{{"train.py", 7, "main"}}, Steps: 20, StepHook: true}
	for _, tc := range []struct {
		name  string
		ranks []Rank
		root  []int
		line  string
	}{
		{"a rank left", []Rank{{Rank: 0, Exited: true, ExitedAt: at, Snapshot: asleep}, {Rank: 1, Snapshot: inColl}},
			[]int{0}, "rank 0 exited with code 0 at 10:00:00.000 while the other ranks ran (after 20 optimizer steps): they wait for it"},
		{"all in a collective", []Rank{{Rank: 0, Snapshot: inColl}, {Rank: 1, Snapshot: inColl}},
			nil, "every rank gorun sees (0, 1) waits in a collective, none outside it"},
		{"none in a collective", []Rank{{Rank: 0, Snapshot: asleep}, {Rank: 1, Snapshot: asleep}},
			[]int{0, 1}, "no rank is in a collective; ranks 0, 1 show no sign of life outside one"},
		{"no probe", []Rank{{Rank: 0}, {Rank: 1}}, nil, "gorun has no probe into these workers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Judge(tc.ranks, nil)
			if !slices.Equal(v.Root, tc.root) {
				t.Errorf("root %v; want %v", v.Root, tc.root)
			}
			if text := strings.Join(v.Lines, "\n"); !strings.Contains(text, tc.line) {
				t.Errorf("verdict lacks %q:\n%s", tc.line, text)
			}
		})
	}
}

func TestOddOnesOut(t *testing.T) {
	call := func(r int, op string) watchdog.RankOp { return watchdog.RankOp{Rank: r, Seq: 5, Op: op} }
	for _, tc := range []struct {
		calls []watchdog.RankOp
		odd   []int
	}{
		{[]watchdog.RankOp{call(0, "all_reduce"), call(1, "broadcast"), call(2, "all_reduce")}, []int{1}},
		{[]watchdog.RankOp{call(0, "all_reduce"), call(1, "broadcast")}, []int{0, 1}}, // even camps: both
		{[]watchdog.RankOp{call(0, "a"), call(1, "a"), call(2, "b"), call(3, "c")}, []int{2, 3}},
	} {
		odd, _ := oddOnesOut(watchdog.Desync{Seq: 5, Calls: tc.calls})
		if !slices.Equal(odd, tc.odd) {
			t.Errorf("%v: odd %v; want %v", tc.calls, odd, tc.odd)
		}
	}
}

// A hang in a subgroup: rank 2 waits in group 0's barrier that ranks 0
// and 1 never entered, but rank 0 waits in group 1's all-reduce that rank
// 1 never entered. Rank 1 holds everyone up; rank 0 only waits.
func TestJudgeSubgroupChain(t *testing.T) {
	st := func(enq, done int64) watchdog.PGStatus {
		return watchdog.PGStatus{LastEnqueued: enq, LastStarted: -1, LastCompleted: done}
	}
	e := func(pg int, seq int64, op string, retired bool) watchdog.Entry {
		return watchdog.Entry{PGID: pg, CollectiveSeqID: seq, ProfilingName: "gloo:" + op, State: watchdog.StateScheduled, Retired: retired}
	}
	dumps := []watchdog.Dump{
		{Rank: 0, WorldSize: 3, PGStatus: map[string]watchdog.PGStatus{"0": st(3, 3), "1": st(4, 3)},
			Entries: []watchdog.Entry{e(0, 3, "all_reduce", true), e(1, 3, "all_reduce", true), e(1, 4, "all_reduce", false)}},
		{Rank: 1, WorldSize: 3, PGStatus: map[string]watchdog.PGStatus{"0": st(3, 3), "1": st(3, 3)},
			Entries: []watchdog.Entry{e(0, 3, "all_reduce", true), e(1, 3, "all_reduce", true)}},
		{Rank: 2, WorldSize: 3, PGStatus: map[string]watchdog.PGStatus{"0": st(4, 3)},
			Entries: []watchdog.Entry{e(0, 3, "all_reduce", true), e(0, 4, "barrier", false)}},
	}
	v := Judge([]Rank{{Rank: 0}, {Rank: 1}, {Rank: 2}}, dumps)
	if !slices.Equal(v.Root, []int{1}) {
		t.Errorf("root %v; want [1]\n%s", v.Root, strings.Join(v.Lines, "\n"))
	}
}

// A rank whose probe did not answer (its thread blocked: the GIL held)
// is placed with its old stack, and the verdict says the stack is old.
func TestJudgeStaleStack(t *testing.T) {
	old := &Snapshot{TimeNs: 1, Stack: []Frame{{"<frozen importlib._bootstrap_external>", 147, "_path_stat"}}}
	waiting := &Snapshot{TimeNs: 1, Stack: []Frame{{"/v/torch/distributed/distributed_c10d.py", 1, "barrier"}}}
	v := Judge([]Rank{{Rank: 0, Snapshot: waiting}, {Rank: 1, Snapshot: old, Stale: true}}, nil)
	if text := strings.Join(v.Lines, "\n"); !slices.Equal(v.Root, []int{1}) || !strings.Contains(text, "when its probe last reported") {
		t.Errorf("root %v\n%s", v.Root, text)
	}
}
