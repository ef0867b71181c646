package etcd

import (
	"fmt"
	"strings"
)

// Range checks of the records read from etcd. A sealed record comes from
// an agent of this job, but an agent of another version, or a bug, must
// not put a negative world size or port -1 into a worker's environment.

// maxHostLen is the longest host name or address accepted (DNS's limit).
const maxHostLen = 253

// checkHost reports whether addr may be a host name or an IP address.
func checkHost(addr string) error {
	if addr == "" || len(addr) > maxHostLen {
		return fmt.Errorf("address %q: want 1 to %d characters", addr, maxHostLen)
	}
	for _, c := range addr {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(".-_:%[]", c)) {
			return fmt.Errorf("address %q: character %q is not allowed in a host name or address", addr, c)
		}
	}
	return nil
}

func checkPort(what string, p int) error {
	if p < 1 || p > 65535 {
		return fmt.Errorf("%s %d: want 1 to 65535", what, p)
	}
	return nil
}

// parseRound decodes and checks round t's record.
func parseRound(payload []byte, t int, sh Shape) (RoundRecord, error) {
	var rec RoundRecord
	if err := decodeRecord(payload, kindClosed, &rec); err != nil {
		return rec, err
	}
	return rec, checkRound(rec, t, sh)
}

// checkRound checks round t's record.
func checkRound(rec RoundRecord, t int, sh Shape) error {
	switch {
	case rec.Round != t:
		return fmt.Errorf("round %d under the key of round %d", rec.Round, t)
	case rec.Size < 1 || rec.Size > sh.MaxNodes:
		return fmt.Errorf("%d nodes: want 1 to %d", rec.Size, sh.MaxNodes)
	case rec.WorldSize < rec.Size || rec.WorldSize > rec.Size*maxNproc:
		return fmt.Errorf("world size %d: want %d nodes x 1 to %d workers", rec.WorldSize, rec.Size, maxNproc)
	case rec.Restarts < 0 || rec.Restarts > sh.MaxRestarts:
		return fmt.Errorf("%d restarts: want 0 to %d", rec.Restarts, sh.MaxRestarts)
	case len(rec.Arrivals) > maxArrivalRuns:
		return fmt.Errorf("%d arrival runs: want at most %d", len(rec.Arrivals), maxArrivalRuns)
	}
	if err := checkHost(rec.MasterAddr); err != nil {
		return fmt.Errorf("master %w", err)
	}
	if err := checkPort("master port", rec.MasterPort); err != nil {
		return err
	}
	if rec.Arrivals != nil {
		n := int64(0)
		for _, run := range rec.Arrivals {
			if run[0] < 1 || run[1] < 1 || run[1] > int64(sh.MaxNodes) {
				return fmt.Errorf("arrival run %v: want a positive revision and count", run)
			}
			n += run[1]
		}
		if n != int64(rec.Size) {
			return fmt.Errorf("arrival runs name %d nodes, the round has %d", n, rec.Size)
		}
	}
	return nil
}

// parseNode decodes and checks the join record of node id.
func parseNode(payload []byte, id string, sh Shape) (NodeRecord, error) {
	var n NodeRecord
	if err := decodeRecord(payload, kindJoin, &n); err != nil {
		return n, err
	}
	switch {
	case n.ID != id:
		return n, fmt.Errorf("node %q under the key of node %q", n.ID, id)
	case n.Nproc < 1 || n.Nproc > maxNproc:
		return n, fmt.Errorf("%d workers: want 1 to %d", n.Nproc, maxNproc)
	case len(n.Role) > maxRoleLen:
		return n, fmt.Errorf("role of %d bytes: want at most %d", len(n.Role), maxRoleLen)
	case n.NodeRank < -1 || n.NodeRank >= sh.MaxNodes:
		return n, fmt.Errorf("node rank %d: want -1 to %d", n.NodeRank, sh.MaxNodes-1)
	case n.PrevRank < -1 || n.PrevRank >= sh.MaxNodes:
		return n, fmt.Errorf("previous rank %d: want -1 to %d", n.PrevRank, sh.MaxNodes-1)
	case n.PrevRound < -1:
		return n, fmt.Errorf("previous round %d: want -1 or more", n.PrevRound)
	}
	if err := checkHost(n.Addr); err != nil {
		return n, err
	}
	return n, checkPort("master port", n.MasterPort)
}

// Bounds of a node's join record.
const (
	maxNproc   = 1 << 16
	maxRoleLen = 256
)

// checkRank checks a member's rank key, for a node of nproc workers,
// against its round.
func checkRank(m memberRanks, nproc int, rec RoundRecord) error {
	if m.group < 0 || m.group >= rec.Size || m.base < m.group || m.base+nproc > rec.WorldSize ||
		m.roleBase < 0 || m.roleBase+nproc > m.roleWorld || m.roleWorld > rec.WorldSize {
		return fmt.Errorf("ranks %+v for %d workers: want a group rank below %d and the node's workers within the world of %d and within their role's", m, nproc, rec.Size, rec.WorldSize)
	}
	return nil
}
