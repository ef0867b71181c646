package etcd

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
)

// TestAssignRanks: ranks as torchrun assigns them to nodes of different
// worker counts and roles, in group-rank order: the global rank counts
// every worker before the node's, the role rank only its role's (PyTorch's
// local_elastic_agent_test, correct_rank_assignment_heterogeneous).
func TestAssignRanks(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		nodes []NodeRecord
		want  []memberRanks
	}{
		{"uniform", []NodeRecord{{Nproc: 2, Role: "default"}, {Nproc: 2, Role: "default"}},
			[]memberRanks{{0, 0, 0, 4}, {1, 2, 2, 4}}},
		{"1, 2 and 3 workers", []NodeRecord{{Nproc: 1, Role: "sum"}, {Nproc: 2, Role: "sum"}, {Nproc: 3, Role: "sum"}},
			[]memberRanks{{0, 0, 0, 6}, {1, 1, 1, 6}, {2, 3, 3, 6}}},
		{"roles", []NodeRecord{{Nproc: 1, Role: "master"}, {Nproc: 2, Role: "trainer"}, {Nproc: 1, Role: "trainer"}, {Nproc: 2, Role: "ps"}},
			[]memberRanks{{0, 0, 0, 1}, {1, 1, 0, 3}, {2, 3, 2, 3}, {3, 4, 0, 2}}},
		{"empty role", []NodeRecord{{Nproc: 1, Role: ""}, {Nproc: 1, Role: "x"}, {Nproc: 1, Role: ""}},
			[]memberRanks{{0, 0, 0, 2}, {1, 1, 0, 1}, {2, 2, 1, 2}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := assignRanks(tt.nodes)
			for i := range tt.want {
				if got[i] != tt.want[i] {
					t.Errorf("node %d: %+v; want %+v", i, got[i], tt.want[i])
				}
				rec := encodeRecord(kindRanks, got[i].record())
				var rr rankRecord
				if err := decodeRecord([]byte(rec), kindRanks, &rr); err != nil || rr.ranks() != got[i] {
					t.Errorf("node %d: rank key %q reads back as %+v, %v", i, rec, rr.ranks(), err)
				}
			}
		})
	}
}

// TestHeterogeneousNodesFormOneJob: nodes of 1, 2 and 3 workers and two
// roles join one job; every worker gets a distinct global rank below the
// world size of 6, and ranks within a role count that role's workers.
func TestHeterogeneousNodesFormOneJob(t *testing.T) {
	t.Parallel()
	as := mustAgents(t, 3, Config{Shape: shape(t.Name(), 3, 3, 0)})
	nodes := []rendezvous.Node{{LocalWorldSize: 1, Role: "master"}, {LocalWorldSize: 2, Role: "trainer"}, {LocalWorldSize: 3, Role: "trainer"}}
	rounds := make([]rendezvous.Round, len(as))
	errs := make([]error, len(as))
	var wg sync.WaitGroup
	for i, a := range as {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rounds[i], errs[i] = a.r.Next(ctx, nodes[i])
		})
	}
	wg.Wait()
	seen := map[int]bool{}
	roleSeen := map[string]map[int]bool{"master": {}, "trainer": {}}
	for i, r := range rounds {
		if errs[i] != nil {
			t.Fatalf("node %d: %v", i, errs[i])
		}
		if r.WorldSize != 6 || r.GroupWorldSize != 3 {
			t.Errorf("node %d: world %d of %d nodes; want 6 of 3", i, r.WorldSize, r.GroupWorldSize)
		}
		role, n := nodes[i].Role, nodes[i].LocalWorldSize
		if want := map[string]int{"master": 1, "trainer": 5}[role]; r.RoleWorldSize != want {
			t.Errorf("node %d (%s): role world %d; want %d", i, role, r.RoleWorldSize, want)
		}
		for lr := range n {
			if g := r.BaseRank + lr; g >= 6 || seen[g] {
				t.Errorf("node %d: global rank %d repeated or out of range", i, g)
			} else {
				seen[g] = true
			}
			if rr := r.BaseRoleRank + lr; rr >= r.RoleWorldSize || roleSeen[role][rr] {
				t.Errorf("node %d: role rank %d repeated or out of range", i, rr)
			} else {
				roleSeen[role][rr] = true
			}
		}
	}
}
