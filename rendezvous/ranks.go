package rendezvous

// Place is a node's ranks in a round: the global rank of its first
// worker, and within its role the rank of its first worker and the
// role's worker count.
type Place struct {
	Base, RoleBase, RoleWorld int
}

// Places gives the nodes of a round, in group-rank order (node i starts
// nprocs[i] workers of role roles[i]), their ranks as torchrun assigns
// them: global ranks over every node's workers in order, each role's
// ranks apart.
func Places(nprocs []int, roles []string) []Place {
	roleWorld := map[string]int{}
	for i, n := range nprocs {
		roleWorld[roles[i]] += n
	}
	out := make([]Place, len(nprocs))
	base, roleBase := 0, map[string]int{}
	for i, n := range nprocs {
		out[i] = Place{Base: base, RoleBase: roleBase[roles[i]], RoleWorld: roleWorld[roles[i]]}
		base += n
		roleBase[roles[i]] += n
	}
	return out
}
