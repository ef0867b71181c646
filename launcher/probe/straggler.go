package probe

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// The straggler watch's rules: over the newest Window collectives that
// every watched rank of a group entered, a rank that entered last, at
// least MinLag after the next-latest, in at least LateShare of them (and
// MinLate at least) is a straggler. A healthy job's last arrivals are
// spread over the ranks and short.
const (
	StragglerWindow    = 20
	StragglerLateShare = 0.3
	StragglerMinLate   = 6
	StragglerMinLag    = 20 * time.Millisecond
)

// maxPending bounds the collectives kept while waiting for every rank's
// arrival.
const maxPending = 4096

// Straggler is a rank named by the straggler watch.
type Straggler struct {
	Rank  int
	Group int
	// Late of the newest Window collectives found it last; Lag is the
	// median of those waits (how long the next-latest rank had been in
	// the collective when it arrived).
	Late, Window int
	Lag          time.Duration
	// Since is the first collective of its run of late arrivals, and
	// SinceTime when the rank entered it; Step is the rank's optimizer
	// steps done then (-1: unknown).
	Since     int64
	SinceTime time.Time
	Step      int64
}

// String says it for a log line.
func (s Straggler) String() string {
	step := ""
	if s.Step >= 0 {
		step = fmt.Sprintf(", its step %d", s.Step)
	}
	return fmt.Sprintf("rank %d is a straggler: it entered last %d of the last %d collectives of group %d, %v after the next-latest rank (median); since collective #%d at %s%s",
		s.Rank, s.Late, s.Window, s.Group, s.Lag.Round(time.Millisecond), s.Since, s.SinceTime.Format("15:04:05.000"), step)
}

// arrival is one judged collective: who entered last, and by how much.
type arrival struct {
	seq  int64
	last int
	lag  time.Duration
	at   time.Time // when the last rank entered it
}

type collKey struct {
	pg  int
	seq int64
}

// Stragglers finds ranks that enter collectives persistently later than
// the others, from their probes' flight-recorder entries (PyTorch 2.x):
// for scripts that know nothing of gorun. Feed it every rank's newest
// snapshot with Observe; Check returns the ranks newly named and those
// no longer late. Not safe for concurrent use.
type Stragglers struct {
	ranks   map[int]bool // the ranks watched
	pending map[collKey]map[int]int64
	judged  map[collKey]bool
	history map[int][]arrival // by group, the newest judged collectives
	steps   map[int]Snapshot  // each rank's newest snapshot, for steps
	named   map[[2]int]Straggler
	minLag  time.Duration // StragglerMinLag, or more (SetMinLag)
}

// NewStragglers watches ranks.
func NewStragglers(ranks []int) *Stragglers {
	s := &Stragglers{ranks: map[int]bool{}, pending: map[collKey]map[int]int64{}, judged: map[collKey]bool{},
		history: map[int][]arrival{}, steps: map[int]Snapshot{}, named: map[[2]int]Straggler{}, minLag: StragglerMinLag}
	for _, r := range ranks {
		s.ranks[r] = true
	}
	return s
}

// Observe takes a rank's snapshot.
func (s *Stragglers) Observe(snap Snapshot) {
	if snap.Rank == nil || snap.Recorder == nil || !s.ranks[*snap.Rank] || len(s.ranks) < 2 {
		return
	}
	rank := *snap.Rank
	s.steps[rank] = snap
	for _, e := range snap.Recorder.Entries {
		if e.IsP2P || e.TimeCreatedNs <= 0 {
			continue
		}
		k := collKey{e.PGID, e.CollectiveSeqID}
		if s.judged[k] {
			continue
		}
		m := s.pending[k]
		if m == nil {
			if len(s.pending) >= maxPending {
				s.dropOldest()
			}
			m = map[int]int64{}
			s.pending[k] = m
		}
		m[rank] = e.TimeCreatedNs
		if len(m) == len(s.ranks) {
			s.judge(k, m)
		}
	}
}

// dropOldest forgets the oldest pending collective (a rank's snapshots
// missed it).
func (s *Stragglers) dropOldest() {
	var oldest collKey
	first := true
	for k := range s.pending {
		if first || k.seq < oldest.seq {
			oldest, first = k, false
		}
	}
	delete(s.pending, oldest)
}

func (s *Stragglers) judge(k collKey, m map[int]int64) {
	delete(s.pending, k)
	s.judged[k] = true
	type at struct {
		rank int
		ns   int64
	}
	var all []at
	for r, ns := range m {
		all = append(all, at{r, ns})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].ns < all[j].ns })
	last, next := all[len(all)-1], all[len(all)-2]
	h := append(s.history[k.pg], arrival{seq: k.seq, last: last.rank, lag: time.Duration(last.ns - next.ns), at: time.Unix(0, last.ns)})
	sort.Slice(h, func(i, j int) bool { return h[i].seq < h[j].seq })
	if len(h) > StragglerWindow {
		h = h[len(h)-StragglerWindow:]
	}
	s.history[k.pg] = h
	// Forget judged keys far behind the window.
	for jk := range s.judged {
		if jk.pg == k.pg && jk.seq < h[0].seq-maxPending {
			delete(s.judged, jk)
		}
	}
}

// Check returns the stragglers newly named since the last Check, and the
// named ones that no longer are.
func (s *Stragglers) Check() (named, recovered []Straggler) {
	if len(s.ranks) < 2 {
		return nil, nil
	}
	for pg, h := range s.history {
		late := map[int][]arrival{}
		for _, a := range h {
			if a.lag >= s.minLag {
				late[a.last] = append(late[a.last], a)
			}
		}
		for r := range s.ranks {
			key := [2]int{pg, r}
			as := late[r]
			is := len(h) >= StragglerMinLate && len(as) >= StragglerMinLate && float64(len(as)) >= StragglerLateShare*float64(len(h))
			_, was := s.named[key]
			switch {
			case is && !was:
				st := s.describe(r, pg, as, len(h))
				s.named[key] = st
				named = append(named, st)
			case !is && was && len(as) == 0:
				recovered = append(recovered, s.named[key])
				delete(s.named, key)
			}
		}
	}
	sort.Slice(named, func(i, j int) bool { return named[i].Rank < named[j].Rank })
	return named, recovered
}

func (s *Stragglers) describe(rank, pg int, late []arrival, window int) Straggler {
	lags := make([]time.Duration, len(late))
	for i, a := range late {
		lags[i] = a.lag
	}
	slices.Sort(lags)
	first := late[0]
	st := Straggler{Rank: rank, Group: pg, Late: len(late), Window: window, Lag: lags[len(lags)/2], Since: first.seq, SinceTime: first.at, Step: -1}
	if snap, ok := s.steps[rank]; ok && snap.StepHook {
		if n, ok := snap.StepAt(first.at); ok {
			st.Step = n
		}
	}
	return st
}
