package etcd

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/rendezvous"
)

// Shape is what every node of a job must agree on. The first node to
// arrive records it; a node with a different shape is refused. A node's
// worker count and role are its own (NodeRecord): nodes may differ in
// both, as torchrun's do.
type Shape struct {
	RunID       string `json:"run_id"`
	MinNodes    int    `json:"min_nodes"`
	MaxNodes    int    `json:"max_nodes"`
	MaxRestarts int    `json:"max_restarts"`
	// Sizes, when set, are the only node counts a round may close with
	// (ascending, within MinNodes..MaxNodes): the sizes at which the job's
	// parallel layout is valid (gorun --plan). A round closes with the
	// largest of them that the joined nodes allow; the nodes beyond it
	// wait as hot spares. Nil: any count from MinNodes to MaxNodes.
	Sizes []int `json:"sizes,omitempty"`
}

// usable returns the number of nodes a round of n joined nodes runs
// with: the largest allowed size not above n, 0 if there is none.
func (s Shape) usable(n int) int {
	if s.Sizes == nil {
		if n < s.MinNodes {
			return 0
		}
		return min(n, s.MaxNodes)
	}
	best := 0
	for _, v := range s.Sizes {
		if v <= n && v >= s.MinNodes && v <= s.MaxNodes {
			best = max(best, v)
		}
	}
	return best
}

// sizesNote names the allowed sizes for a log line ("" without them).
func (s Shape) sizesNote() string {
	if s.Sizes == nil {
		return ""
	}
	return fmt.Sprintf(" (the layout is valid at %v nodes)", s.Sizes)
}

// spareBeside reports whether a node waiting beside a running round of
// size nodes is a hot spare: one more node allows no larger round (the
// round is at MaxNodes, or the next valid --plan size is further away).
func (s Shape) spareBeside(size int) bool { return s.usable(size+1) <= size }

// largest is the largest node count a round may close with.
func (s Shape) largest() int { return s.usable(s.MaxNodes) }

// smallest is the smallest node count a round may close with.
func (s Shape) smallest() int {
	for n := s.MinNodes; n <= s.MaxNodes; n++ {
		if s.usable(n) == n {
			return n
		}
	}
	return 0
}

// Diff says how other differs from s, naming the settings that differ;
// nil if they agree.
func (s Shape) Diff(other Shape) error {
	var format []string
	var args []any
	add := func(setting setting.Name, what string, mine, theirs any) {
		if mine != theirs {
			format = append(format, "%s"+what+": this node has %v, the job has %v")
			args = append(args, setting, mine, theirs)
		}
	}
	add("RunID", "", s.RunID, other.RunID)
	add("NNodes", " (min)", s.MinNodes, other.MinNodes)
	add("NNodes", " (max)", s.MaxNodes, other.MaxNodes)
	add("MaxRestarts", "", s.MaxRestarts, other.MaxRestarts)
	add("Plan", " (the node counts its layout allows)", fmt.Sprint(s.Sizes), fmt.Sprint(other.Sizes))
	if format == nil {
		return nil
	}
	return setting.Errorf(strings.Join(format, "; "), args...)
}

// NodeRecord is the value of a node's join key.
type NodeRecord struct {
	// ID identifies the agent: host, pid and a random suffix.
	ID string `json:"id"`
	// Addr is where the node's workers are reached; MasterPort a port that
	// was free on it when it joined, used if it becomes node 0.
	Addr       string `json:"addr"`
	MasterPort int    `json:"master_port"`
	Nproc      int    `json:"nproc"`
	// Role is the node's workers' role (--role): ranks within a role
	// (ROLE_RANK) count that role's workers only.
	Role string `json:"role"`
	// NodeRank is the rank asked for with --node-rank, or -1.
	NodeRank int `json:"node_rank"`
	// PrevRank is the node's group rank in the last round it ran, or -1;
	// survivors keep their relative order.
	PrevRank int `json:"prev_rank"`
	// PrevRound is the round PrevRank is from: only the previous round's
	// survivors keep their order.
	PrevRound int `json:"prev_round"`
	// Revision is the join key's create revision (set when read back):
	// the order of arrival among new nodes.
	Revision int64 `json:"-"`
}

// RoundRecord is the closed round: written once, atomically, after the
// members' ranks (rank/<round>/<node id>). It stays small whatever the
// number of nodes, because every agent receives it.
type RoundRecord struct {
	Round      int    `json:"round"`
	Size       int    `json:"size"`
	WorldSize  int    `json:"world_size"`
	MasterAddr string `json:"master_addr"`
	MasterPort int    `json:"master_port"`
	Restarts   int    `json:"restarts"`
	// ShapeHash identifies the job's shape (shapeHash): every member
	// checks it against its own.
	ShapeHash string `json:"shape_hash"`
	// Arrivals, when set, lists the members' join revisions in rank
	// order as runs of consecutive revisions [first, count]. The closer
	// sets it when ranks follow the order of arrival (no --node-rank, no
	// earlier round's order to keep) in a few runs: a member then finds
	// its rank from its own join revision, without reading its rank key.
	Arrivals [][2]int64 `json:"arrivals,omitempty"`
}

// shapeHash is the hash of a recorded shape that round records carry:
// FNV-1a, 64 bits, in hex.
func shapeHash(recorded string) string {
	h := fnv.New64a()
	h.Write([]byte(recorded))
	return fmt.Sprintf("%016x", h.Sum64())
}

// maxArrivalRuns bounds Arrivals, which every agent receives.
const maxArrivalRuns = 64

// arrivalRuns returns the runs of Arrivals for members in rank order, or
// nil when their ranks do not follow their arrival or the runs would be
// too many.
func arrivalRuns(ordered []NodeRecord) [][2]int64 {
	var runs [][2]int64
	for _, m := range ordered {
		// A member finds its ranks from its group rank alone only when
		// every member has the same workers and role.
		if m.NodeRank >= 0 || m.PrevRank >= 0 || m.Revision <= 0 || m.Nproc != ordered[0].Nproc || m.Role != ordered[0].Role {
			return nil
		}
		if n := len(runs); n > 0 && runs[n-1][0]+runs[n-1][1] == m.Revision {
			runs[n-1][1]++
			continue
		}
		if len(runs) == maxArrivalRuns {
			return nil
		}
		runs = append(runs, [2]int64{m.Revision, 1})
	}
	return runs
}

// arrivalRank finds the group rank of the member that joined at revision
// rev in runs; ok is false if no member joined then.
func arrivalRank(runs [][2]int64, rev int64) (group int, ok bool) {
	for _, run := range runs {
		if rev >= run[0] && rev < run[0]+run[1] {
			return group + int(rev-run[0]), true
		}
		group += int(run[1])
	}
	return 0, false
}

// memberRanks is a member's place in a round: its group rank, the global
// rank of its first worker, and within its role the rank of its first
// worker and the role's worker count, as torchrun assigns them (in group
// rank order).
type memberRanks struct {
	group, base, roleBase, roleWorld int
}

// assignRanks gives the members, in group-rank order, their ranks
// (rendezvous.Places).
func assignRanks(ordered []NodeRecord) []memberRanks {
	nprocs, roles := make([]int, len(ordered)), make([]string, len(ordered))
	for i, m := range ordered {
		nprocs[i], roles[i] = m.Nproc, m.Role
	}
	out := make([]memberRanks, len(ordered))
	for i, p := range rendezvous.Places(nprocs, roles) {
		out[i] = memberRanks{group: i, base: p.Base, roleBase: p.RoleBase, roleWorld: p.RoleWorld}
	}
	return out
}

// rankRecord is a member's rank key's record.
type rankRecord struct {
	Group     int `json:"group"`
	Base      int `json:"base"`
	RoleBase  int `json:"role_base"`
	RoleWorld int `json:"role_world"`
}

func (m memberRanks) record() rankRecord {
	return rankRecord{Group: m.group, Base: m.base, RoleBase: m.roleBase, RoleWorld: m.roleWorld}
}

func (rr rankRecord) ranks() memberRanks {
	return memberRanks{group: rr.Group, base: rr.Base, roleBase: rr.RoleBase, roleWorld: rr.RoleWorld}
}

// orderMembers sorts joined nodes into group-rank order. A rank asked
// for with --node-rank is given when it is below the number of nodes; the
// other nodes fill the free ranks in order: those that asked for a rank
// (by that rank), then survivors of the last round in their old order,
// then new nodes in order of arrival. Every agent computes the same order
// from the same set. Beyond maxNodes, the last in that order are left out
// (they wait for the next round). Nodes must ask for distinct ranks (see
// admit).
func orderMembers(nodes []NodeRecord, maxNodes int) []NodeRecord {
	sorted := slices.Clone(nodes)
	key := func(n NodeRecord) (int, int64, string) {
		switch {
		case n.NodeRank >= 0:
			return 0, int64(n.NodeRank), n.ID
		case n.PrevRank >= 0:
			return 1, int64(n.PrevRank), n.ID
		default:
			return 2, n.Revision, n.ID
		}
	}
	slices.SortStableFunc(sorted, func(a, b NodeRecord) int {
		ga, ra, ia := key(a)
		gb, rb, ib := key(b)
		if ga != gb {
			return ga - gb
		}
		if ra != rb {
			if ra < rb {
				return -1
			}
			return 1
		}
		return strings.Compare(ia, ib)
	})
	sorted = sorted[:min(len(sorted), maxNodes)]
	n := len(sorted)
	out := make([]NodeRecord, n)
	taken := make([]bool, n)
	var rest []NodeRecord
	for _, m := range sorted {
		if m.NodeRank >= 0 && m.NodeRank < n && !taken[m.NodeRank] {
			out[m.NodeRank], taken[m.NodeRank] = m, true
		} else {
			rest = append(rest, m)
		}
	}
	free := 0
	for _, m := range rest {
		for taken[free] {
			free++
		}
		out[free], taken[free] = m, true
	}
	return out
}

// admit drops the nodes that asked for a --node-rank that an earlier
// arrival asked for too: the first to join holds the rank (it also holds
// the round's node-rank key, and the later one is refused).
func admit(nodes []NodeRecord) []NodeRecord {
	first := map[int]NodeRecord{}
	for _, n := range nodes {
		if n.NodeRank < 0 {
			continue
		}
		if f, ok := first[n.NodeRank]; !ok || n.Revision < f.Revision {
			first[n.NodeRank] = n
		}
	}
	out := make([]NodeRecord, 0, len(nodes))
	for _, n := range nodes {
		if n.NodeRank < 0 || first[n.NodeRank].ID == n.ID {
			out = append(out, n)
		}
	}
	return out
}

// keys lays out the job's keys under <prefix>/<run id>/. Control keys
// (the round counter, the outcome, the closed rounds) share the ctl/
// prefix so that one cheap watch sees all of them; each node's join and
// done keys stand apart, so that no agent has to watch every other.
type keys struct{ root string }

func newKeys(prefix, runID string) keys { return keys{root: path.Join(prefix, runID) + "/"} }

func (k keys) ctl() string      { return k.root + "ctl/" }
func (k keys) token() string    { return k.root + "ctl/token" }
func (k keys) shape() string    { return k.root + "ctl/shape" }
func (k keys) round() string    { return k.root + "ctl/round" }
func (k keys) restarts() string { return k.root + "ctl/restarts" }
func (k keys) outcome() string  { return k.root + "ctl/outcome" }
func (k keys) stop() string     { return k.root + "ctl/stop" }
func (k keys) closed(r int) string {
	return k.root + "ctl/closed/" + strconv.Itoa(r)
}
func (k keys) end(r int) string { return k.root + "ctl/end/" + strconv.Itoa(r) }

// closedPrefix and endPrefix hold every round's record and end.
func (k keys) closedPrefix() string { return k.root + "ctl/closed/" }
func (k keys) endPrefix() string    { return k.root + "ctl/end/" }
func (k keys) closer(r int) string {
	return k.root + "ctl/closer/" + strconv.Itoa(r)
}
func (k keys) rankPrefix(r int) string      { return k.root + "rank/" + strconv.Itoa(r) + "/" }
func (k keys) rank(r int, id string) string { return k.rankPrefix(r) + id }

func (k keys) nodeRank(r, rank int) string {
	return k.root + "noderank/" + strconv.Itoa(r) + "/" + strconv.Itoa(rank)
}
func (k keys) joinPrefix(r int) string      { return k.root + "join/" + strconv.Itoa(r) + "/" }
func (k keys) join(r int, id string) string { return k.joinPrefix(r) + id }
func (k keys) donePrefix(r int) string      { return k.root + "done/" + strconv.Itoa(r) + "/" }
func (k keys) done(r int, id string) string { return k.donePrefix(r) + id }

// store is the prefix workers of a round use for their own keys.
func (k keys) store(r int) string { return k.root + "store/" + strconv.Itoa(r) + "/" }

func marshal(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", v, err)
	}
	return string(b), nil
}
