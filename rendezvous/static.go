package rendezvous

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun-dev/gorun/internal/setting"
)

// DefaultStaticPort is torchrun's master port for the static backend. All
// nodes of a static job must agree on the port, so it cannot be chosen at
// random as in a single-node job.
const DefaultStaticPort = 29500

// StaticConfig configures a Static rendezvous.
type StaticConfig struct {
	// RunID is the job id reported in every round.
	RunID string
	// NNodes is the fixed number of nodes.
	NNodes int
	// NodeRank is this node's rank, 0..NNodes-1.
	NodeRank int
	// MasterAddr and MasterPort are where node 0 meets the others, and
	// where the workers' store is served: by node 0's agent for Python
	// workers (MeetOn), else by worker rank 0.
	MasterAddr string
	MasterPort int
	// MaxRestarts is this node's restart budget (--max-restarts).
	MaxRestarts int
	// JoinTimeout bounds the first round's meeting of the nodes
	// (DefaultStaticJoinTimeout when 0).
	JoinTimeout time.Duration
	// ShowSetting names a setting as the users of the other nodes know
	// it (the command line's flag), in what node 0 tells them of their
	// mismatch or refusal; nil: the setting's own name.
	ShowSetting func(setting.Name) string
}

// Static is torchrun's static rendezvous: a fixed number of nodes, each
// told its node rank, and a master address and port given on the command
// line. At the first round the nodes meet once at the master port (see
// meet) to learn each other's worker counts and roles, which may differ,
// as under torchrun; ranks follow in node-rank order, and restarts keep
// them without meeting again. It is safe for concurrent use.
type Static struct {
	counter
	cfg StaticConfig
	// table is every node's worker count and role, once met.
	mu    sync.Mutex
	table *staticTable
	// meetLn, when set (MeetOn), is where node 0 meets the others: the
	// connections that the agent's store on the master port diverts.
	meetLn net.Listener
}

// AgentStorePort is the port of the workers' store that the agent
// serves for Python workers, as torchrun 2.x's static rendezvous does:
// the master port on node 0, which the agent then holds from the
// meeting (MeetOn) to the job's end; elsewhere none is used (0: any).
func (s *Static) AgentStorePort() int {
	if s.cfg.NodeRank == 0 {
		return s.cfg.MasterPort
	}
	return 0
}

// MeetOn has node 0 meet the other nodes on ln, the connections that
// the agent's store on the master port diverts to the meeting, instead
// of a listener of its own that it would close before the workers'
// store binds the port: the port is never free between the two. The
// meeting then hands out no job secret (the workers are Python's, whose
// store is the agent's). Call it before the first Next.
func (s *Static) MeetOn(ln net.Listener) {
	if s.cfg.NodeRank != 0 {
		ln.Close() // the others meet node 0 on its port, not here
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meetLn = ln
}

// meetingListener is MeetOn's listener, if any, and whether there is one.
func (s *Static) meetingListener() (net.Listener, bool) {
	return s.meetLn, s.meetLn != nil
}

// NewStatic validates cfg and returns a static rendezvous.
func NewStatic(cfg StaticConfig) (*Static, error) {
	if cfg.NNodes < 1 {
		return nil, setting.Errorf("rendezvous: static: %s %d, want at least 1", setting.Name("NNodes"), cfg.NNodes)
	}
	if cfg.NodeRank < 0 || cfg.NodeRank >= cfg.NNodes {
		return nil, setting.Errorf("rendezvous: static: %s %d outside 0..%d (%s=%d)", setting.Name("NodeRank"), cfg.NodeRank, cfg.NNodes-1, setting.Name("NNodes"), cfg.NNodes)
	}
	if cfg.MasterAddr == "" {
		return nil, setting.Errorf("rendezvous: static: empty %s", setting.Name("MasterAddr"))
	}
	if cfg.MasterPort < 1 || cfg.MasterPort > 65535 {
		return nil, setting.Errorf("rendezvous: static: %s %d outside 1..65535", setting.Name("MasterPort"), cfg.MasterPort)
	}
	if err := checkMaxRestarts(cfg.MaxRestarts); err != nil {
		return nil, err
	}
	return &Static{cfg: cfg, counter: counter{maxRestarts: cfg.MaxRestarts}}, nil
}

// Next returns the node's fixed place in the job: at the first round the
// nodes meet on the master port (meet), where node 0 tells each its ranks
// from every node's worker count and role, and hands out the job's
// secret; later rounds keep them.
func (s *Static) Next(ctx context.Context, node Node) (Round, error) {
	if err := node.Validate(); err != nil {
		return Round{}, err
	}
	if err := ctx.Err(); err != nil {
		return Round{}, err
	}
	table, err := s.met(ctx, node)
	if err != nil {
		return Round{}, err
	}
	n, restarts, err := s.nextRound()
	if err != nil {
		return Round{}, err
	}
	r := s.DryRunRound(node)
	r.Place(s.cfg.NodeRank, Nodes{Nprocs: table.Nprocs, Roles: table.Roles})
	r.Number, r.RestartCount = n, restarts
	r.JobSecret = Token(table.JobSecret) // none for one node: the launcher makes its own
	return r, nil
}

// met returns the nodes' table, meeting the other nodes the first time
// (a job of one node meets nobody).
func (s *Static) met(ctx context.Context, node Node) (staticTable, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.table != nil {
		return *s.table, nil
	}
	t := staticTable{Nprocs: []int{node.LocalWorldSize}, Roles: []string{node.Role}}
	if s.cfg.NNodes > 1 {
		var err error
		t, err = s.meet(ctx, staticHello{Version: staticVersion, RunID: s.cfg.RunID, NNodes: s.cfg.NNodes,
			NodeRank: s.cfg.NodeRank, Nproc: node.LocalWorldSize, Role: node.Role, MaxRestarts: s.cfg.MaxRestarts})
		if err != nil {
			return staticTable{}, err
		}
	}
	s.table = &t
	return t, nil
}

// DryRunRound returns the round that Next would return for node, as round 0,
// without joining it; --dry-run shows it, as if every node had this
// node's worker count and role (the others' are known only once they
// meet).
func (s *Static) DryRunRound(node Node) Round {
	r := Round{RunID: s.cfg.RunID, MasterAddr: s.cfg.MasterAddr, MasterPort: s.cfg.MasterPort}
	r.Place(s.cfg.NodeRank, Uniform(s.cfg.NNodes, node.LocalWorldSize, node.Role))
	return r
}

// SplitEndpoint splits a rendezvous endpoint "host", "host:port" or
// "[v6addr]:port" into host and port; port is defaultPort when absent.
func SplitEndpoint(endpoint string, defaultPort int) (string, int, error) {
	host, portStr := endpoint, ""
	switch {
	case strings.HasPrefix(endpoint, "["):
		end := strings.IndexByte(endpoint, ']')
		if end < 0 {
			return "", 0, fmt.Errorf("endpoint %q: missing ']'", endpoint)
		}
		host, portStr = endpoint[1:end], strings.TrimPrefix(endpoint[end+1:], ":")
		if rest := endpoint[end+1:]; rest != "" && !strings.HasPrefix(rest, ":") {
			return "", 0, fmt.Errorf("endpoint %q: want [address]:port", endpoint)
		}
	case strings.Count(endpoint, ":") == 1:
		host, portStr, _ = strings.Cut(endpoint, ":")
	case strings.Count(endpoint, ":") > 1:
		return "", 0, fmt.Errorf("endpoint %q: write an IPv6 address as [address]:port", endpoint)
	}
	if host == "" {
		return "", 0, fmt.Errorf("endpoint %q: empty host", endpoint)
	}
	if portStr == "" {
		return host, defaultPort, nil
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("endpoint %q: port %q outside 1..65535", endpoint, portStr)
	}
	return host, port, nil
}
