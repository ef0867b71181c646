package launcher

import (
	"slices"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/watchdog"
)

// TestOrderFailuresPutsTheCauseFirst: the failures' order is the order
// gorun saw the exits in, except that a rank stopped by another's failure
// (ExitRemoteAbort) never leads and a rank whose error says it lost a
// peer follows a failure without those words seen up to exitSeenSlack
// later (each worker is reaped by its own goroutine, so a SIGKILLed rank
// can be seen after the peer its death made fail).
func TestOrderFailuresPutsTheCauseFirst(t *testing.T) {
	at := time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC)
	lost := "ddp: all-reduce #20: the peer closed its connection (it was stopped, or it exited)"
	own := "ValueError: bad batch"
	type f struct {
		rank  int
		after time.Duration
		code  int
		tail  string
	}
	cases := []struct {
		name  string
		in    []f
		ranks []int
	}{
		{"time order", []f{{1, 20 * time.Millisecond, 1, own}, {0, 0, 1, own}}, []int{0, 1}},
		{"a SIGKILL seen after the peer it made fail", []f{{0, 0, 123, lost}, {1, 3 * time.Millisecond, 137, ""}}, []int{1, 0}},
		{"an own error seen after a lost peer", []f{{0, 0, 1, lost}, {1, 900 * time.Millisecond, 1, own}}, []int{1, 0}},
		{"too late to be the cause", []f{{0, 0, 1, lost}, {1, 2 * time.Second, 1, own}}, []int{0, 1}},
		{"every rank lost a peer", []f{{2, 5 * time.Millisecond, 1, lost}, {0, 0, 1, lost}}, []int{0, 2}},
		{"the cause behind two that lost it", []f{{0, 0, 1, lost}, {2, time.Millisecond, 1, lost}, {1, 2 * time.Millisecond, 139, ""}}, []int{1, 0, 2}},
		{"a remote abort never leads", []f{{0, 0, watchdog.ExitRemoteAbort, ""}, {1, time.Millisecond, 1, lost}}, []int{1, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tails := map[int]string{}
			var failures []Failure
			for _, x := range tc.in {
				failures = append(failures, Failure{Rank: x.rank, LocalRank: x.rank, ExitCode: x.code, Time: at.Add(x.after)})
				tails[x.rank] = x.tail
			}
			got := orderFailures(failures, func(f Failure) string { return tails[f.LocalRank] })
			var ranks []int
			for _, f := range got {
				ranks = append(ranks, f.Rank)
			}
			if !slices.Equal(ranks, tc.ranks) {
				t.Errorf("ranks %v; want %v", ranks, tc.ranks)
			}
		})
	}
}
