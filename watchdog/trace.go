package watchdog

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gorun-dev/gorun/internal/sys/proc"
)

// Verdict is what the dumps of a job's ranks say about a hang or a desync.
type Verdict struct {
	// Ranks are the ranks whose dumps were read.
	Ranks []int `json:"ranks"`
	// Missing are the ranks below the world size without a dump.
	Missing []int         `json:"missing_dumps,omitempty"`
	Groups  []GroupReport `json:"groups"`
	// Summary is the verdict in a few lines.
	Summary []string `json:"summary"`
}

// GroupReport is one process group's state across the ranks.
type GroupReport struct {
	PGID int `json:"pg_id"`
	// Name is the group's name from pg_config ("" if none).
	Name string `json:"name,omitempty"`
	// Stuck is the first collective not completed everywhere (nil: all
	// completed).
	Stuck *StuckCollective `json:"stuck,omitempty"`
	// Desyncs are collectives whose op, sizes or dtypes differ across
	// ranks at one sequence number.
	Desyncs []Desync `json:"desyncs,omitempty"`
	// LastCompleted is each rank's last completed collective.
	LastCompleted []RankOp `json:"last_completed"`
}

// StuckCollective is the collective the ranks wait in, and who never
// reached it.
type StuckCollective struct {
	Seq int64  `json:"collective_seq_id"`
	Op  string `json:"op"`
	// Waiting ranks called it and wait for it to finish; NotStarted
	// enqueued it but it never started there; NeverCalled ranks never
	// enqueued it: they are the ones to look at.
	Waiting     []int `json:"waiting,omitempty"`
	NotStarted  []int `json:"enqueued_not_started,omitempty"`
	NeverCalled []int `json:"never_called,omitempty"`
}

// Desync is one sequence number at which ranks disagree.
type Desync struct {
	Seq   int64    `json:"collective_seq_id"`
	Calls []RankOp `json:"calls"`
}

// RankOp is one rank's collective at a sequence number.
type RankOp struct {
	Rank   int       `json:"rank"`
	Seq    int64     `json:"collective_seq_id"`
	Op     string    `json:"op"`
	Sizes  [][]int64 `json:"input_sizes,omitempty"`
	DTypes []string  `json:"input_dtypes,omitempty"`
	State  string    `json:"state,omitempty"`
}

func (r RankOp) describe() string {
	if r.Op == "" {
		return fmt.Sprintf("#%d", r.Seq)
	}
	return fmt.Sprintf("%s #%d %v %s", r.Op, r.Seq, r.Sizes, strings.Join(r.DTypes, ","))
}

// ReadDumps reads every rank's dump in dir.
func ReadDumps(dir string) ([]Dump, error) {
	paths, err := filepath.Glob(filepath.Join(dir, dumpGlob))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: no flight recorder dumps (fr_trace_rank_<rank>.json) here", dir)
	}
	return ReadDumpFiles(paths)
}

// MinDumpsValues is the least of the JSON values ReadDumpFiles decodes
// in all (dumpsValues): some 300 full recorders of 2,000 entries.
const MinDumpsValues = 1 << 24

// bytesPerValue is what a dump's JSON value takes decoded, at most.
const bytesPerValue = 128

// dumpsValues bounds the JSON values ReadDumpFiles decodes in all: what
// half the memory the kernel says is available holds, and at least
// MinDumpsValues. A folder of dumps that are not a job's (or more than
// this machine can analyse) costs no more, and the machine's other work
// is not pushed out.
func dumpsValues() int {
	avail, ok := proc.MemAvailable()
	if !ok {
		return MinDumpsValues
	}
	return max(MinDumpsValues, int(min(avail/2/bytesPerValue, MaxDumpsValues)))
}

// MaxDumpsValues is the most JSON values ReadDumpFiles decodes in all,
// however much memory there is (some 4 GB decoded).
const MaxDumpsValues = 1 << 25

// MaxGroupEntries bounds process groups times entries in the dumps read
// together: the analysis looks at each group's entries in each dump
// (a dump of 16,384 empty groups and 131,072 empty entries, 595 KB,
// took minutes). Real recorders: tens of groups, thousands of entries.
const MaxGroupEntries = 1 << 25

// ReadDumpFiles reads the dumps at paths (ReadDump), by rank; past
// dumpsValues in all it stops with an error naming the file.
func ReadDumpFiles(paths []string) ([]Dump, error) {
	dumps := make([]Dump, 0, len(paths))
	total, budget := 0, dumpsValues()
	for _, p := range paths {
		d, values, err := readDump(p)
		if err != nil {
			return nil, err
		}
		if total += values; total > budget {
			return nil, fmt.Errorf("%s: the %d dumps read so far hold more than %d JSON values in all, more than half the memory available here holds decoded: analyse fewer ranks' dumps (a folder of some of them), or on a machine with more memory", p, len(dumps)+1, budget)
		}
		dumps = append(dumps, d)
	}
	groups, entries := map[string]bool{}, 0
	for _, d := range dumps {
		for id := range d.PGStatus {
			groups[id] = true
		}
		entries += len(d.Entries)
	}
	if len(groups)*entries > MaxGroupEntries {
		return nil, fmt.Errorf("the dumps hold %d process groups and %d entries: more than the %d pairs gorun trace analyses; not a job's flight recorders", len(groups), entries, MaxGroupEntries)
	}
	sort.Slice(dumps, func(i, j int) bool { return dumps[i].Rank < dumps[j].Rank })
	return dumps, nil
}

// LiveSnapshotID begins the request id of dumps asked of a running job
// (gorun's SIGUSR1): their Reason holds it.
const LiveSnapshotID = "usr1-"

// Analyze merges the ranks' dumps into a verdict. Dumps of a running job
// (LiveSnapshotID) are each rank's at its own moment: the verdict says so
// first, for a collective in flight there is no hang.
func Analyze(dumps []Dump) Verdict {
	var v Verdict
	world := 0
	pgs := map[int]bool{}
	for _, d := range dumps {
		v.Ranks = append(v.Ranks, d.Rank)
		world = max(world, d.WorldSize)
		for id := range d.PGStatus {
			if n, err := strconv.Atoi(id); err == nil {
				pgs[n] = true
			}
		}
	}
	have := make(map[int]bool, len(v.Ranks))
	for _, r := range v.Ranks {
		have[r] = true
	}
	for r := range world { // at most MaxWorldSize (ReadDump)
		if !have[r] {
			v.Missing = append(v.Missing, r)
		}
	}
	ids := make([]int, 0, len(pgs))
	for id := range pgs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		g := analyzeGroup(id, dumps)
		v.Groups = append(v.Groups, g)
		v.Summary = append(v.Summary, g.summary()...)
	}
	if len(v.Missing) > 0 {
		v.Summary = append(v.Summary, fmt.Sprintf("no dump from rank(s) %s: they may have died before dumping", rankRuns(v.Missing)))
	}
	if len(v.Summary) == 0 {
		v.Summary = []string{"every rank completed every collective it enqueued: no hang and no desync in these dumps"}
	}
	live := len(dumps) > 0
	for _, d := range dumps {
		live = live && strings.Contains(d.Reason, LiveSnapshotID)
	}
	if live {
		v.Summary = append([]string{"these dumps are a snapshot of a running job (SIGUSR1), each rank's taken at its own moment: a collective that some ranks completed and others had not reached yet was in flight, not hung"}, v.Summary...)
	}
	return v
}

// seqEntry finds rank d's collective seq in group pg.
func seqEntry(d Dump, pg int, seq int64) (Entry, bool) {
	for _, e := range d.Entries {
		if e.PGID == pg && !e.IsP2P && e.CollectiveSeqID == seq {
			return e, true
		}
	}
	return Entry{}, false
}

func opOf(e Entry) string {
	name := e.ProfilingName
	for _, backend := range []string{"gorun:", "nccl:", "gloo:"} {
		name = strings.TrimPrefix(name, backend)
	}
	return name
}

func analyzeGroup(pg int, dumps []Dump) GroupReport {
	g := GroupReport{PGID: pg}
	key := strconv.Itoa(pg)
	for _, d := range dumps {
		if c, ok := d.PGConfig[key]; ok && pg != 0 {
			g.Name = c.Name
		}
	}
	// The first sequence number some rank did not complete.
	first := int64(-1)
	for _, d := range dumps {
		st, ok := d.PGStatus[key]
		if !ok {
			continue
		}
		e, _ := seqEntry(d, pg, st.LastCompleted)
		g.LastCompleted = append(g.LastCompleted, RankOp{Rank: d.Rank, Seq: st.LastCompleted, Op: opOf(e), Sizes: e.InputSizes, DTypes: e.InputDtypes})
		if st.LastEnqueued > st.LastCompleted || anyEnqueuedBeyond(dumps, key, st.LastCompleted) {
			if s := st.LastCompleted + 1; first < 0 || s < first {
				first = s
			}
		}
	}
	if first >= 0 {
		s := &StuckCollective{Seq: first}
		for _, d := range dumps {
			st, ok := d.PGStatus[key]
			if !ok {
				continue
			}
			switch e, found := seqEntry(d, pg, first); {
			case st.LastEnqueued < first:
				s.NeverCalled = append(s.NeverCalled, d.Rank)
			case found && e.State == StateScheduled && tracksStart(d):
				s.NotStarted = append(s.NotStarted, d.Rank)
				s.Op = opOf(e)
			case st.LastCompleted < first:
				s.Waiting = append(s.Waiting, d.Rank)
				if found {
					s.Op = opOf(e)
				}
			}
		}
		if len(s.Waiting)+len(s.NotStarted)+len(s.NeverCalled) > 0 {
			g.Stuck = s
		}
	}
	g.Desyncs = desyncs(pg, dumps)
	return g
}

// anyEnqueuedBeyond reports whether some rank enqueued past seq.
func anyEnqueuedBeyond(dumps []Dump, key string, seq int64) bool {
	for _, d := range dumps {
		if st, ok := d.PGStatus[key]; ok && st.LastEnqueued > seq {
			return true
		}
	}
	return false
}

// desyncs compares the ranks' entries at each sequence number.
func desyncs(pg int, dumps []Dump) []Desync {
	bySeq := map[int64][]RankOp{}
	for _, d := range dumps {
		for _, e := range d.Entries {
			if e.PGID == pg && !e.IsP2P {
				bySeq[e.CollectiveSeqID] = append(bySeq[e.CollectiveSeqID], RankOp{Rank: d.Rank, Seq: e.CollectiveSeqID, Op: opOf(e),
					Sizes: e.InputSizes, DTypes: e.InputDtypes, State: e.State})
			}
		}
	}
	var out []Desync
	for seq, calls := range bySeq {
		for _, c := range calls[1:] {
			if c.describe() != calls[0].describe() {
				out = append(out, Desync{Seq: seq, Calls: calls})
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// label names the group in the verdict.
func (g GroupReport) label() string {
	if g.Name != "" {
		return fmt.Sprintf("group %s (pg %d)", g.Name, g.PGID)
	}
	return fmt.Sprintf("group %d", g.PGID)
}

func (g GroupReport) summary() []string {
	var out []string
	if s := g.Stuck; s != nil {
		op := s.Op
		if op == "" {
			op = "collective"
		}
		line := fmt.Sprintf("%s: %s #%d never completed", g.label(), op, s.Seq)
		if len(s.Waiting) > 0 {
			line += fmt.Sprintf("; rank(s) %s wait in it", ranks(s.Waiting))
		}
		if len(s.NotStarted) > 0 {
			line += fmt.Sprintf("; rank(s) %s enqueued it but it never started there", ranks(s.NotStarted))
		}
		if len(s.NeverCalled) > 0 {
			line += fmt.Sprintf("; rank(s) %s never called it: look there (hung or elsewhere)", ranks(s.NeverCalled))
		}
		out = append(out, line)
	}
	for _, d := range g.Desyncs {
		var calls []string
		for _, c := range d.Calls {
			calls = append(calls, fmt.Sprintf("rank %d %s", c.Rank, c.describe()))
		}
		out = append(out, fmt.Sprintf("%s: desync at collective #%d: the ranks called different collectives: %s", g.label(), d.Seq, strings.Join(calls, "; ")))
	}
	return out
}

func ranks(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ", ")
}

// rankRuns lists sorted ranks as ranks does, writing three or more in a
// row as a range ("0, 4-9999"): a job of thousands of ranks of which few
// dumped stays one line.
func rankRuns(rs []int) string {
	var s []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		switch {
		case j-i >= 2:
			s = append(s, strconv.Itoa(rs[i])+"-"+strconv.Itoa(rs[j]))
		case j > i:
			s = append(s, strconv.Itoa(rs[i]), strconv.Itoa(rs[j]))
		default:
			s = append(s, strconv.Itoa(rs[i]))
		}
		i = j + 1
	}
	return strings.Join(s, ", ")
}

// Text writes the verdict for people.
func (v Verdict) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gorun trace: dumps of rank(s) %s\n", ranks(v.Ranks))
	for _, l := range v.Summary {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	for _, g := range v.Groups {
		fmt.Fprintf(&b, "%s, last completed collective per rank:\n", g.label())
		for _, c := range g.LastCompleted {
			if c.Seq < 0 {
				fmt.Fprintf(&b, "  rank %d: none\n", c.Rank)
				continue
			}
			fmt.Fprintf(&b, "  rank %d: %s\n", c.Rank, c.describe())
		}
	}
	return b.String()
}

// AnalyzeDir reads dir's dumps and analyzes them.
func AnalyzeDir(dir string) (Verdict, error) {
	if _, err := os.Stat(dir); err != nil {
		return Verdict{}, fmt.Errorf("trace: %w", err)
	}
	dumps, err := ReadDumps(dir)
	if err != nil {
		return Verdict{}, err
	}
	return Analyze(dumps), nil
}

// Trim keeps what a verdict needs of a dump, to send it across nodes:
// pg_status, pg_config, and per group the entries from the last completed
// collective on (point-to-point entries not completed).
func Trim(d Dump) Dump {
	out := d
	out.Entries = nil
	for _, e := range d.Entries {
		st, ok := d.PGStatus[strconv.Itoa(e.PGID)]
		switch {
		case e.IsP2P && e.State != StateCompleted:
		case !e.IsP2P && (!ok || e.CollectiveSeqID >= st.LastCompleted):
		default:
			continue
		}
		out.Entries = append(out.Entries, e)
	}
	return out
}
