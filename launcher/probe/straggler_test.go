package probe

import (
	"testing"
	"time"

	"github.com/gorun-dev/gorun/watchdog"
)

// feed makes three ranks enter collectives 1..n, 100 ms apart; late(r,
// seq) is how much later rank r enters seq; it returns the straggler
// watch's findings after each collective.
func feed(s *Stragglers, from, to int64, late func(rank int, seq int64) time.Duration, each func(seq int64, named, recovered []Straggler)) {
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for seq := from; seq <= to; seq++ {
		for r := range 3 {
			at := start.Add(time.Duration(seq)*100*time.Millisecond + time.Duration(r)*time.Millisecond + late(r, seq))
			rank := r
			s.Observe(Snapshot{Rank: &rank, TimeNs: at.UnixNano(), StepHook: true, Steps: seq / 2, StepTimesNs: []int64{start.UnixNano()},
				Recorder: &Recorder{Entries: []watchdog.Entry{{CollectiveSeqID: seq, TimeCreatedNs: at.UnixNano()}}}})
		}
		named, recovered := s.Check()
		each(seq, named, recovered)
	}
}

func TestStragglers(t *testing.T) {
	for _, tc := range []struct {
		name string
		late func(rank int, seq int64) time.Duration
		// want: the rank named and by which collective (-1: none), and
		// the collective its lateness is dated from.
		rank         int
		by, since    int64
		recoverAfter int64 // the rank is on time again from here (0: never)
	}{
		{"healthy: small, spread lateness", func(r int, seq int64) time.Duration {
			return time.Duration((int64(r)*7+seq*3)%15) * time.Millisecond
		}, -1, 0, 0, 0},
		{"three times slower from the start", func(r int, seq int64) time.Duration {
			if r == 1 {
				return 200 * time.Millisecond
			}
			return 0
		}, 1, 6, 1, 0},
		{"slows down mid-run, on one collective of two", func(r int, seq int64) time.Duration {
			if r == 2 && seq >= 100 && seq%2 == 0 {
				return 200 * time.Millisecond
			}
			return 0
		}, 2, 110, 100, 0},
		{"a straggler that recovers", func(r int, seq int64) time.Duration {
			if r == 0 && seq < 40 {
				return 50 * time.Millisecond
			}
			return 0
		}, 0, 6, 1, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStragglers([]int{0, 1, 2})
			var got *Straggler
			var gotBy, recoveredAt int64
			feed(s, 1, 160, tc.late, func(seq int64, named, recovered []Straggler) {
				if len(named) > 0 && got == nil {
					got, gotBy = &named[0], seq
				}
				if len(recovered) > 0 {
					recoveredAt = seq
				}
			})
			switch {
			case tc.rank < 0 && got != nil:
				t.Fatalf("named %v in a healthy job", got)
			case tc.rank < 0:
				return
			case got == nil:
				t.Fatalf("rank %d never named", tc.rank)
			}
			if got.Rank != tc.rank || gotBy > tc.by || got.Since != tc.since {
				t.Errorf("named %+v at collective %d; want rank %d by %d, since #%d", *got, gotBy, tc.rank, tc.by, tc.since)
			}
			if tc.recoverAfter > 0 && (recoveredAt < tc.recoverAfter || recoveredAt > tc.recoverAfter+StragglerWindow) {
				t.Errorf("recovered at %d; want within a window after %d", recoveredAt, tc.recoverAfter)
			}
		})
	}
}

func TestStragglersNeedTwoRanks(t *testing.T) {
	s := NewStragglers([]int{0})
	feed(s, 1, 50, func(int, int64) time.Duration { return time.Second }, func(_ int64, named, _ []Straggler) {
		if len(named) > 0 {
			t.Fatalf("a lone rank named: %v", named)
		}
	})
}
