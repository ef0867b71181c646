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
