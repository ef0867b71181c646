// Package chaos is gorun's chaos suite: rounds of a real elastic job on
// three hosts (Linux network namespaces on one machine, internal/testkit/nettest)
// with the embedded 3-member store, into which faults are injected at
// times drawn from a seed. Each round checks that the job completed with
// the right final loss and checksum (or failed with a clear verdict), that
// no process of the job is left on the machine (workers' grandchildren
// included) and that no gorun file is left in /dev/shm; the report counts
// the faults by kind, the time from each fault to training again, the
// jobs completed, the orphans and the leaked files.
//
//	make chaos SEED=1 ROUNDS=20
//
// The faults: SIGKILL of a worker, SIGKILL of an agent (every node hosts
// a member of the store, so this is always a member's host), SIGSTOP of an
// agent for longer than the lease TTL, a cut of a host's network and its
// heal, and SIGKILL of one store member's process.
package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults the suite injects.
const (
	WorkerKill Kind = "SIGKILL worker"
	AgentKill  Kind = "SIGKILL agent (member host)"
	AgentStop  Kind = "SIGSTOP agent > lease TTL"
	NetCut     Kind = "network cut + heal"
	MemberKill Kind = "SIGKILL store member"
)

// Kinds lists every kind, in the report's order.
var Kinds = []Kind{WorkerKill, AgentKill, AgentStop, NetCut, MemberKill}

// kindNames are the kinds' names on the command line.
var kindNames = map[string]Kind{"worker": WorkerKill, "agent": AgentKill, "stop": AgentStop, "cut": NetCut, "member": MemberKill}

// ParseKinds reads a comma-separated list of fault names (worker, agent,
// stop, cut, member); "" or "all" is every kind.
func ParseKinds(s string) ([]Kind, error) {
	if s == "" || s == "all" {
		return nil, nil
	}
	var out []Kind
	for _, name := range strings.Split(s, ",") {
		k, ok := kindNames[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("chaos: fault %q: want worker, agent, stop, cut or member (or all)", name)
		}
		out = append(out, k)
	}
	return out, nil
}

// Workload is the training job of a round.
type Workload string

// The workloads: examples/ddp (Go, gorun's CPU process groups) and
// examples/pytorch/train_ddp.py (PyTorch DDP over gloo).
const (
	GoDDP    Workload = "bin/ddp"
	TorchDDP Workload = "pytorch"
)

// Config is one run of the suite.
type Config struct {
	// Seed draws the faults, their targets and their times.
	Seed uint64
	// Rounds is the number of jobs; FaultsPerRound the faults in each.
	Rounds, FaultsPerRound int
	// Kinds are the faults drawn (nil: every kind, Kinds).
	Kinds []Kind
	// Gorun is the gorun binary (gorun-etcd beside it); DDP examples/ddp's.
	Gorun, DDP string
	// Python and TrainScript run the PyTorch example; with Python empty
	// every round runs bin/ddp.
	Python, TrainScript string
	// TorchEvery makes every TorchEvery-th round a PyTorch one (0: none).
	TorchEvery int
	// StoreLogLevel, when set, is etcd's log level in each job's store
	// (--rdzv-conf store_log_level).
	StoreLogLevel string
	// Logf receives progress; with Verbose, every agent's lines too (else
	// only a bad round's).
	Logf    func(format string, args ...any)
	Verbose bool
}

// The job's timing: short enough for many rounds, long enough for every
// fault to land while it trains.
const (
	leaseTTL     = 2 * time.Second
	lastCall     = time.Second
	holdFor      = leaseTTL + 1500*time.Millisecond // SIGSTOP and network cut
	ddpSteps     = 60
	stepTime     = 100 * time.Millisecond
	torchSteps   = 40
	maxRestarts  = 3
	roundTimeout = 3 * time.Minute
	// detectWithin bounds how long after a fault (or its heal) a new round
	// of workers starts if the fault ends the running one.
	detectWithin = 2*leaseTTL + lastCall + time.Second
)

// scheduledFault is one fault of a round's script; the target node is drawn
// when it is injected (among the nodes still there).
type scheduledFault struct {
	kind  Kind
	after time.Duration // from training (again) to the fault
}

// roundScript is one round: its workload and its faults, in order.
type roundScript struct {
	workload Workload
	faults   []scheduledFault
}

// scripts draws every round's faults from the seed: each kind as often as
// the others (in a shuffled order), at most one lost agent per round and
// that one last, since a node whose agent is killed stays lost.
func scripts(cfg Config) []roundScript {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6368616f73))
	n := cfg.Rounds * cfg.FaultsPerRound
	drawn := cfg.Kinds
	if len(drawn) == 0 {
		drawn = Kinds
	}
	kinds := make([]Kind, n)
	for i := range kinds {
		kinds[i] = drawn[i%len(drawn)]
	}
	rng.Shuffle(n, func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	per := cfg.FaultsPerRound
	count := func(r int) int {
		return len(slices.DeleteFunc(slices.Clone(kinds[r*per:(r+1)*per]), func(k Kind) bool { return k != AgentKill }))
	}
	// A second lost agent in a round changes places with another kind in
	// a round that has none.
	for r := range cfg.Rounds {
		for count(r) > 1 {
			i := r*per + slices.Index(kinds[r*per:(r+1)*per], AgentKill)
			swapped := false
			for o := range cfg.Rounds {
				if o == r || count(o) > 0 {
					continue
				}
				j := o * per
				kinds[i], kinds[j] = kinds[j], kinds[i]
				swapped = true
				break
			}
			if !swapped {
				kinds[i] = drawn[0] // too few rounds to spread them
				if kinds[i] == AgentKill {
					kinds[i] = MemberKill
				}
			}
		}
	}
	rounds := make([]roundScript, cfg.Rounds)
	for r := range rounds {
		rounds[r].workload = GoDDP
		if cfg.Python != "" && cfg.TorchEvery > 0 && r%cfg.TorchEvery == cfg.TorchEvery-1 {
			rounds[r].workload = TorchDDP
		}
		for _, k := range kinds[r*per : (r+1)*per] {
			rounds[r].faults = append(rounds[r].faults, scheduledFault{kind: k, after: time.Duration(300+rng.IntN(1700)) * time.Millisecond})
		}
		slices.SortStableFunc(rounds[r].faults, func(a, b scheduledFault) int {
			return boolInt(a.kind == AgentKill) - boolInt(b.kind == AgentKill)
		})
	}
	return rounds
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// String describes a round's script for the log.
func (p roundScript) String() string {
	s := string(p.workload) + ":"
	for _, f := range p.faults {
		s += fmt.Sprintf(" [%s after %v]", f.kind, f.after)
	}
	return s
}
