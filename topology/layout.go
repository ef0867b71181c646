package topology

import (
	"fmt"
	"slices"
)

// Layout is a parallel layout: how World ranks are split into tensor
// (TP), pipeline (PP), context (CP), expert (EP) and expert-tensor (ETP)
// parallel dimensions; data parallel (DP) takes the rest. Order lists the
// dimensions from fastest-varying (adjacent ranks) to slowest, as
// Megatron's order strings do.
type Layout struct {
	World int
	TP    int
	PP    int
	// VPP is the number of virtual pipeline stages per pipeline rank
	// (interleaved schedule); 0 means none.
	VPP int
	CP  int
	EP  int
	// ETP is the expert tensor-parallel size; 0 means TP.
	ETP   int
	Order string
}

// withDefaults fills zero sizes: 1 for the dimensions, TP for ETP, the
// default order.
func (l Layout) withDefaults() Layout {
	for _, p := range []*int{&l.TP, &l.PP, &l.CP, &l.EP} {
		if *p == 0 {
			*p = 1
		}
	}
	if l.ETP == 0 {
		l.ETP = l.TP
	}
	if l.Order == "" {
		l.Order = DefaultOrder
	}
	return l
}

// DP is the data-parallel size of the dense part: World / (TP*PP*CP).
func (l Layout) DP() int {
	l = l.withDefaults()
	return l.World / (l.TP * l.PP * l.CP)
}

// EDP is the expert data-parallel size: World / (ETP*EP*PP). CP folds
// into it, as in Megatron Core.
func (l Layout) EDP() int {
	l = l.withDefaults()
	return l.World / (l.ETP * l.EP * l.PP)
}

// GroupKinds lists the group kinds in the order Megatron Core creates
// them, under the names of its parallel-state globals as
// golden/rank_groups.json keys them.
var groupKinds = []string{
	"dp_cp", "dp", "cp", "mp", "tp", "pp", "embd", "pos_embd", "tp_dp_cp", "tp_dp", "tp_cp",
	"ep", "expt_tp", "tp_ep", "tp_ep_pp", "expt_dp",
}

// GroupKinds returns the kinds of rank groups, in Megatron Core's order of
// creation.
func GroupKinds() []string { return slices.Clone(groupKinds) }

// groupSource is where a kind of group comes from: a generator and a token.
var groupSource = map[string]struct {
	expert bool
	token  string
}{
	"dp_cp": {false, "dp-cp"}, "dp": {false, "dp"}, "cp": {false, "cp"}, "mp": {false, "tp-pp"},
	"tp": {false, "tp"}, "pp": {false, "pp"}, "tp_dp_cp": {false, "tp-dp-cp"}, "tp_dp": {false, "tp-dp"},
	"tp_cp": {false, "tp-cp"}, "ep": {true, "ep"}, "expt_tp": {true, "tp"}, "tp_ep": {true, "tp-ep"},
	"tp_ep_pp": {true, "tp-ep-pp"}, "expt_dp": {true, "dp"},
}

// Ranks builds the rank generators of a layout; it fails when the layout
// cannot be generated at all (see Validate for every rule).
type Ranks struct {
	layout         Layout
	dense, expert  *generator
	denseDP, expDP int
	cache          map[string][][]int
}

// NewRanks checks that the layout's sizes divide the world and that the
// order names every dimension larger than 1, and returns its ranks.
func NewRanks(l Layout) (*Ranks, error) {
	l = l.withDefaults()
	if l.World < 1 {
		return nil, fmt.Errorf("world size %d: want at least 1", l.World)
	}
	model := l.TP * l.PP * l.CP
	if l.World%model != 0 {
		return nil, fmt.Errorf("world size %d is not divisible by tp*pp*cp = %d", l.World, model)
	}
	if l.World%(l.ETP*l.EP*l.PP) != 0 {
		return nil, fmt.Errorf("world size %d is not divisible by etp*ep*pp = %d", l.World, l.ETP*l.EP*l.PP)
	}
	r := &Ranks{layout: l, denseDP: l.DP(), expDP: l.EDP(), cache: map[string][][]int{}}
	var err error
	r.dense, err = newGenerator(map[string]int{DimTP: l.TP, DimCP: l.CP, DimEP: 1, DimDP: r.denseDP, DimPP: l.PP}, l.Order)
	if err != nil {
		return nil, err
	}
	r.expert, err = newGenerator(map[string]int{DimTP: l.ETP, DimCP: 1, DimEP: l.EP, DimDP: r.expDP, DimPP: l.PP}, l.Order)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Layout is the layout with its defaults filled in.
func (r *Ranks) Layout() Layout { return r.layout }

// Groups returns the groups of one kind (see GroupKinds), in Megatron
// Core's order, or nil for an unknown kind. The result is shared: do not
// modify it.
func (r *Ranks) Groups(kind string) [][]int {
	if g, ok := r.cache[kind]; ok {
		return g
	}
	var g [][]int
	switch kind {
	case "embd", "pos_embd":
		for _, pp := range r.Groups("pp") {
			e := []int{pp[0]}
			if kind == "embd" && len(pp) > 1 {
				e = append(e, pp[len(pp)-1])
			}
			g = append(g, e)
		}
	default:
		src, ok := groupSource[kind]
		if !ok {
			return nil
		}
		gen := r.dense
		if src.expert {
			gen = r.expert
		}
		g = gen.groups(src.token)
	}
	r.cache[kind] = g
	return g
}

// Coordinates is one rank's place in the layout.
type Coordinates struct {
	Rank int `json:"rank"`
	// Node and LocalRank follow from the ranks per node (0: unknown).
	Node      int `json:"node"`
	LocalRank int `json:"local_rank"`
	TP        int `json:"tp"`
	PP        int `json:"pp"`
	DP        int `json:"dp"`
	CP        int `json:"cp"`
	EP        int `json:"ep"`
	ExpertTP  int `json:"expt_tp"`
	ExpertDP  int `json:"expt_dp"`
}

// Coordinates returns rank's index in each dimension (its rank in its
// TP, PP, DP, ... group). perNode, if positive, gives its node and local
// rank.
func (r *Ranks) Coordinates(rank, perNode int) Coordinates {
	c := Coordinates{
		Rank: rank,
		TP:   r.dense.coordinate(rank, DimTP), PP: r.dense.coordinate(rank, DimPP),
		DP: r.dense.coordinate(rank, DimDP), CP: r.dense.coordinate(rank, DimCP),
		EP: r.expert.coordinate(rank, DimEP), ExpertTP: r.expert.coordinate(rank, DimTP),
		ExpertDP: r.expert.coordinate(rank, DimDP),
	}
	if perNode > 0 {
		c.Node, c.LocalRank = rank/perNode, rank%perNode
	}
	return c
}
