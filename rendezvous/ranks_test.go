package rendezvous

import "testing"

// TestRoundPlace: a node's ranks in a round, as torchrun assigns them:
// global ranks over the nodes in group-rank order, each role's apart.
func TestRoundPlace(t *testing.T) {
	mixed := Nodes{Nprocs: []int{2, 3, 1, 4}, Roles: []string{"trainer", "reader", "trainer", "reader"}}
	for _, tc := range []struct {
		name  string
		nodes Nodes
		node  int
		want  Round
	}{
		{"one node", Uniform(1, 8, "default"), 0, Round{GroupRank: 0, GroupWorldSize: 1, BaseRank: 0, WorldSize: 8, BaseRoleRank: 0, RoleWorldSize: 8}},
		{"uniform, node 2", Uniform(4, 8, "default"), 2, Round{GroupRank: 2, GroupWorldSize: 4, BaseRank: 16, WorldSize: 32, BaseRoleRank: 16, RoleWorldSize: 32}},
		{"mixed, node 1", mixed, 1, Round{GroupRank: 1, GroupWorldSize: 4, BaseRank: 2, WorldSize: 10, BaseRoleRank: 0, RoleWorldSize: 7}},
		{"mixed, node 2", mixed, 2, Round{GroupRank: 2, GroupWorldSize: 4, BaseRank: 5, WorldSize: 10, BaseRoleRank: 2, RoleWorldSize: 3}},
		{"mixed, node 3", mixed, 3, Round{GroupRank: 3, GroupWorldSize: 4, BaseRank: 6, WorldSize: 10, BaseRoleRank: 3, RoleWorldSize: 7}},
	} {
		var got Round
		got.Place(tc.node, tc.nodes)
		if got.GroupRank != tc.want.GroupRank || got.GroupWorldSize != tc.want.GroupWorldSize || got.BaseRank != tc.want.BaseRank ||
			got.WorldSize != tc.want.WorldSize || got.BaseRoleRank != tc.want.BaseRoleRank || got.RoleWorldSize != tc.want.RoleWorldSize {
			t.Errorf("%s: %+v; want %+v", tc.name, got, tc.want)
		}
	}
}
