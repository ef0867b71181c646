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

// Nodes is a round's nodes in group-rank order: each node's worker
// count and role (the job's shape, its node counts and restarts, is the
// etcd backend's Shape).
type Nodes struct {
	Nprocs []int
	Roles  []string
}

// Uniform is n nodes that each start nproc workers of role.
func Uniform(n, nproc int, role string) Nodes {
	s := Nodes{Nprocs: make([]int, n), Roles: make([]string, n)}
	for i := range n {
		s.Nprocs[i], s.Roles[i] = nproc, role
	}
	return s
}

// Place sets r's ranks for the node of group rank i in a round of the
// nodes s (Places): every backend's round, and a dry run's, is placed by
// this one function.
func (r *Round) Place(i int, s Nodes) {
	p := Places(s.Nprocs, s.Roles)[i]
	world := 0
	for _, n := range s.Nprocs {
		world += n
	}
	r.GroupRank, r.GroupWorldSize = i, len(s.Nprocs)
	r.BaseRank, r.WorldSize = p.Base, world
	r.BaseRoleRank, r.RoleWorldSize = p.RoleBase, p.RoleWorld
}
