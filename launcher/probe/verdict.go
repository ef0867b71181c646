package probe

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gorun-dev/gorun/watchdog"
)

// Rank is what gorun knows of one rank once the job stopped moving.
type Rank struct {
	Rank int
	// Exited: the rank's process ended while the others ran, with
	// ExitCode at ExitedAt.
	Exited   bool
	ExitCode int
	ExitedAt time.Time
	// Snapshot is its probe's newest (nil: no probe, as for Go workers);
	// Stale when the probe did not answer the request for evidence (its
	// thread blocked, the GIL held): the stack is then old.
	Snapshot *Snapshot
	Stale    bool
}

// Verdict says which ranks held the others up, and how.
type Verdict struct {
	// Root are the ranks that held the others up; empty when gorun
	// cannot tell (then Lines say so).
	Root  []int
	Lines []string
}

// Judge finds the rank that holds a stopped job up, in this order of
// evidence: a rank that left while the others ran; a desync (ranks in
// different collectives at one sequence number); ranks that never
// entered the collective the others wait in (flight recorder, PyTorch
// 2.x); ranks outside any collective while the others are in one (the
// stacks, where there is no flight recorder: PyTorch 1.x). dumps are the
// ranks' full flight recorders where they wrote them (else the
// snapshots' newest entries are used).
func Judge(ranks []Rank, dumps []watchdog.Dump) Verdict {
	var v Verdict
	byRank := map[int]Rank{}
	for _, r := range ranks {
		byRank[r.Rank] = r
	}
	where := func(rank int) string {
		r := byRank[rank]
		if r.Snapshot == nil || len(r.Snapshot.Stack) == 0 {
			return ""
		}
		if r.Stale {
			return fmt.Sprintf("%s when its probe last reported (%s; it did not answer since: the GIL held? its stacks come from SIGABRT, in its output)",
				r.Snapshot.Top(3), r.Snapshot.Time().Format("15:04:05.000"))
		}
		return r.Snapshot.Top(3)
	}
	// A rank that left.
	for _, r := range ranks {
		if !r.Exited {
			continue
		}
		v.Root = append(v.Root, r.Rank)
		line := fmt.Sprintf("rank %d exited with code %d at %s while the other ranks ran", r.Rank, r.ExitCode, r.ExitedAt.Format("15:04:05.000"))
		if r.Snapshot != nil {
			line += lastSeen(*r.Snapshot)
		}
		v.Lines = append(v.Lines, line+": they wait for it")
	}
	if len(v.Root) > 0 {
		return v
	}
	if len(dumps) == 0 {
		for _, r := range ranks {
			if r.Snapshot != nil {
				if d, ok := r.Snapshot.Dump(); ok {
					dumps = append(dumps, d)
				}
			}
		}
	}
	if len(dumps) > 0 {
		fr := watchdog.Analyze(dumps)
		for _, g := range fr.Groups {
			if g.Stuck == nil {
				continue
			}
			if d, ok := desyncAt(g, g.Stuck.Seq); ok {
				odd, line := oddOnesOut(d)
				v.Root = append(v.Root, odd...)
				v.Lines = append(v.Lines, fmt.Sprintf("desync at collective #%d of group %d: %s", d.Seq, g.PGID, line))
				continue
			}
			if len(g.Stuck.NeverCalled) == 0 {
				continue
			}
			v.Root = append(v.Root, g.Stuck.NeverCalled...)
			line := fmt.Sprintf("%s never entered %s #%d of group %d", who(g.Stuck.NeverCalled), opName(g.Stuck.Op), g.Stuck.Seq, g.PGID)
			if w := append(slices.Clone(g.Stuck.Waiting), g.Stuck.NotStarted...); len(w) > 0 {
				slices.Sort(w)
				line += fmt.Sprintf(" (%s %s in it)", who(w), verb(w, "waits", "wait"))
			}
			v.Lines = append(v.Lines, line)
		}
		if len(v.Root) > 0 {
			v.Root = notWaiting(uniqueSorted(v.Root), dumps)
			for _, r := range v.Root {
				if w := where(r); w != "" {
					v.Lines = append(v.Lines, fmt.Sprintf("rank %d is %s, at %s", r, placeOf(byRank[r]), w))
				}
			}
			return v
		}
	}
	// No flight recorder, or one that blames nobody: the stacks.
	var outside, inside []int
	for _, r := range ranks {
		if r.Snapshot == nil || len(r.Snapshot.Stack) == 0 {
			continue
		}
		if r.Snapshot.Where() == "" {
			outside = append(outside, r.Rank)
		} else {
			inside = append(inside, r.Rank)
		}
	}
	if len(outside) > 0 && len(inside) > 0 {
		v.Root = outside
		for _, r := range outside {
			v.Lines = append(v.Lines, fmt.Sprintf("rank %d is outside any collective, at %s", r, where(r)))
		}
		v.Lines = append(v.Lines, fmt.Sprintf("%s %s in torch.distributed or in backward (DDP's all-reduce)", who(inside), verb(inside, "waits", "wait")))
		return v
	}
	if len(inside) > 0 {
		v.Lines = append(v.Lines, fmt.Sprintf("every rank gorun sees (%s) waits in a collective, none outside it: what holds them is below the ranks (the network, the backend) or on a rank gorun does not see", ranksText(inside)))
		return v
	}
	if len(outside) > 0 {
		v.Lines = append(v.Lines, fmt.Sprintf("no rank is in a collective; %s %s no sign of life outside one", who(outside), verb(outside, "shows", "show")))
		v.Root = outside
		for _, r := range outside {
			v.Lines = append(v.Lines, fmt.Sprintf("rank %d is at %s", r, where(r)))
		}
		return v
	}
	v.Lines = append(v.Lines, "gorun has no probe into these workers (not Python, or --worker-probe=off): their stacks are in their output")
	return v
}

// notWaiting drops from ranks those that wait in a collective of
// another group (a rank that never entered group 0's barrier because it
// waits in group 1's all-reduce holds nobody up), unless that leaves
// none.
func notWaiting(ranks []int, dumps []watchdog.Dump) []int {
	waiting := map[int]bool{}
	for _, d := range dumps {
		for _, e := range d.Entries {
			if !e.Retired && !e.IsP2P {
				waiting[d.Rank] = true
			}
		}
	}
	var out []int
	for _, r := range ranks {
		if !waiting[r] {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return ranks
	}
	return out
}

// placeOf says whether a rank's main thread is in a collective.
func placeOf(r Rank) string {
	if r.Snapshot == nil {
		return "somewhere gorun cannot see"
	}
	if _, in := r.Snapshot.InFlight(); in {
		return "in a collective"
	}
	switch r.Snapshot.Where() {
	case "collective":
		return "in torch.distributed"
	case "backward":
		return "in backward"
	}
	return "outside any collective"
}

// lastSeen says what the rank had done when its probe last wrote.
func lastSeen(s Snapshot) string {
	var parts []string
	if s.StepHook {
		parts = append(parts, fmt.Sprintf("after %d optimizer steps", s.Steps))
	}
	if s.Recorder != nil {
		last := int64(-1)
		for _, e := range s.Recorder.Entries {
			if e.Retired && !e.IsP2P {
				last = max(last, e.CollectiveSeqID)
			}
		}
		if last >= 0 {
			parts = append(parts, fmt.Sprintf("its last collective #%d", last))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// desyncAt finds the group's desync at seq.
func desyncAt(g watchdog.GroupReport, seq int64) (watchdog.Desync, bool) {
	for _, d := range g.Desyncs {
		if d.Seq == seq {
			return d, true
		}
	}
	return watchdog.Desync{}, false
}

// oddOnesOut splits a desync's calls by what was called: the ranks of
// the smaller camps are the odd ones out (all of them when the camps are
// even).
func oddOnesOut(d watchdog.Desync) ([]int, string) {
	camps := map[string][]int{}
	for _, c := range d.Calls {
		key := callText(c)
		camps[key] = append(camps[key], c.Rank)
	}
	keys := make([]string, 0, len(camps))
	for k := range camps {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(camps[keys[i]]) != len(camps[keys[j]]) {
			return len(camps[keys[i]]) < len(camps[keys[j]])
		}
		return keys[i] < keys[j]
	})
	biggest := len(camps[keys[len(keys)-1]])
	var odd []int
	var parts []string
	for _, k := range keys {
		rs := camps[k]
		slices.Sort(rs)
		if len(rs) < biggest || len(camps[keys[0]]) == biggest {
			odd = append(odd, rs...)
		}
		parts = append(parts, fmt.Sprintf("%s called %s", who(rs), k))
	}
	return uniqueSorted(odd), strings.Join(parts, " where ")
}

func callText(c watchdog.RankOp) string {
	s := opName(c.Op)
	if len(c.Sizes) > 0 {
		s += fmt.Sprintf(" %v", c.Sizes)
	}
	if len(c.DTypes) > 0 {
		s += " " + strings.Join(c.DTypes, ",")
	}
	return s
}

func opName(op string) string {
	if op == "" {
		return "a collective"
	}
	return op
}

// who is "rank 1" or "ranks 0, 2".
func who(rs []int) string {
	if len(rs) == 1 {
		return "rank " + strconv.Itoa(rs[0])
	}
	return "ranks " + ranksText(rs)
}

// verb picks the singular or plural form for ranks rs.
func verb(rs []int, one, many string) string {
	if len(rs) == 1 {
		return one
	}
	return many
}

func ranksText(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ", ")
}

func uniqueSorted(rs []int) []int {
	out := slices.Clone(rs)
	slices.Sort(out)
	return slices.Compact(out)
}
