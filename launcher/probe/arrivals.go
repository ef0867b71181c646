package probe

import (
	"slices"
	"sort"
	"time"

	"github.com/gorun-dev/gorun/watchdog"
)

// Arrival is when the first of one node's ranks entered a collective of
// the default group (group 0, which spans every rank): what a node tells
// the others for the job-wide straggler watch. A node whose first rank
// is late is late as a whole (a slow host, a throttled link); one slow
// rank among punctual ones is its own node's straggler, not the node.
type Arrival struct {
	Seq    int64 `json:"seq"`
	TimeNs int64 `json:"t"`
}

// FirstArrivals returns, oldest first, for the newest n collectives of
// the default group that every one of snaps' ranks entered, when the
// first of them entered it.
func FirstArrivals(snaps []Snapshot, n int) []Arrival {
	first := map[int64]int64{}
	count := map[int64]int{}
	ranks := 0
	for _, s := range snaps {
		if s.Rank == nil || s.Recorder == nil {
			continue
		}
		ranks++
		for _, e := range s.Recorder.Entries {
			if e.IsP2P || e.PGID != 0 || e.TimeCreatedNs <= 0 {
				continue
			}
			count[e.CollectiveSeqID]++
			if t, ok := first[e.CollectiveSeqID]; !ok || e.TimeCreatedNs < t {
				first[e.CollectiveSeqID] = e.TimeCreatedNs
			}
		}
	}
	var out []Arrival
	for seq, c := range count {
		if c == ranks {
			out = append(out, Arrival{Seq: seq, TimeNs: first[seq]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out[max(0, len(out)-n):]
}

// NodeSnapshot turns a node's arrivals into the snapshot of one
// pseudo-rank (the node's index) for a Stragglers that compares nodes:
// steps are those of the node's ranks (in step with each other).
func NodeSnapshot(node int, arrivals []Arrival, steps Snapshot) Snapshot {
	s := Snapshot{Rank: &node, Steps: steps.Steps, StepTimesNs: slices.Clone(steps.StepTimesNs), StepHook: steps.StepHook, Recorder: &Recorder{}}
	for _, a := range arrivals {
		s.Recorder.Entries = append(s.Recorder.Entries, recorderEntry(a))
	}
	return s
}

// SetMinLag raises the lag below which an arrival is not late: across
// hosts, by the clocks' uncertainty.
func (s *Stragglers) SetMinLag(d time.Duration) { s.minLag = max(d, StragglerMinLag) }

func recorderEntry(a Arrival) watchdog.Entry {
	return watchdog.Entry{PGID: 0, CollectiveSeqID: a.Seq, TimeCreatedNs: a.TimeNs}
}
