package topology

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// goldenLayouts is golden/rank_groups.json (computed by running Megatron
// Core's own code; see testdata/README.md).
type goldenLayouts struct {
	Layouts []struct {
		ID     string `json:"id"`
		Inputs struct {
			World int    `json:"world_size"`
			TP    int    `json:"tensor_model_parallel_size"`
			PP    int    `json:"pipeline_model_parallel_size"`
			CP    int    `json:"context_parallel_size"`
			EP    int    `json:"expert_model_parallel_size"`
			ETP   *int   `json:"expert_tensor_parallel_size"`
			VPP   *int   `json:"virtual_pipeline_model_parallel_size"`
			Order string `json:"order"`
		} `json:"inputs"`
		Derived struct {
			DP  int `json:"dp"`
			EDP int `json:"expert_dp"`
		} `json:"derived"`
		Groups map[string]struct {
			Ranks [][]int `json:"ranks"`
		} `json:"groups"`
		Coordinates []map[string]int `json:"rank_coordinates"`
		Placement   *goldenPlacement `json:"layer_placement"`
	} `json:"layouts"`
	Extra []goldenPlacement `json:"extra_layer_placements"`
}

type goldenPlacement struct {
	ID        string `json:"id"`
	NumLayers int    `json:"num_layers"`
	VPP       *int   `json:"vpp"`
	Stages    []struct {
		PPRank int `json:"pp_rank"`
		Chunks []struct {
			VPStage   *int  `json:"vp_stage"`
			Offset    int   `json:"offset"`
			NumLayers int   `json:"num_layers"`
			Layers    []int `json:"layers_0based"`
		} `json:"chunks"`
	} `json:"stages"`
}

func readGolden(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func TestRankGroupsMatchMegatron(t *testing.T) {
	var g goldenLayouts
	readGolden(t, "rank_groups.json", &g)
	if len(g.Layouts) == 0 {
		t.Fatal("no layouts in the golden file")
	}
	for _, c := range g.Layouts {
		t.Run(c.ID, func(t *testing.T) {
			in := c.Inputs
			l := Layout{World: in.World, TP: in.TP, PP: in.PP, CP: in.CP, EP: in.EP, Order: in.Order}
			if in.ETP != nil {
				l.ETP = *in.ETP
			}
			r, err := NewRanks(l)
			if err != nil {
				t.Fatal(err)
			}
			if l.DP() != c.Derived.DP || l.EDP() != c.Derived.EDP {
				t.Errorf("dp %d, edp %d; want %d, %d", l.DP(), l.EDP(), c.Derived.DP, c.Derived.EDP)
			}
			for _, kind := range GroupKinds() {
				want, ok := c.Groups[kind]
				if !ok {
					t.Fatalf("golden layout has no %q groups", kind)
				}
				if got := r.Groups(kind); !reflect.DeepEqual(got, want.Ranks) {
					t.Errorf("%s groups:\n got %v\nwant %v", kind, got, want.Ranks)
				}
			}
			for _, want := range c.Coordinates {
				got := r.Coordinates(want["rank"], 0)
				pairs := map[string]int{"tp_rank": got.TP, "pp_rank": got.PP, "dp_rank": got.DP, "cp_rank": got.CP,
					"ep_rank": got.EP, "expt_tp_rank": got.ExpertTP, "expt_dp_rank": got.ExpertDP}
				for k, v := range pairs {
					if want[k] != v {
						t.Errorf("rank %d: %s %d; want %d", want["rank"], k, v, want[k])
					}
				}
			}
		})
	}
}

func TestLayerPlacementMatchesMegatron(t *testing.T) {
	var g goldenLayouts
	readGolden(t, "rank_groups.json", &g)
	type named struct {
		name string
		p    Pipeline
		want *goldenPlacement
	}
	var cases []named
	for _, c := range g.Layouts {
		if c.Placement == nil {
			continue
		}
		p := Pipeline{NumLayers: c.Placement.NumLayers, PP: c.Inputs.PP}
		if c.Inputs.VPP != nil {
			p.VPP = *c.Inputs.VPP
		}
		cases = append(cases, named{c.ID, p, c.Placement})
	}
	// The extra placements are named for their inputs.
	extra := map[string]Pipeline{
		"layer_placement_uneven_L80_pp4_vpp5_first15_last15":  {NumLayers: 80, PP: 4, VPP: 5, FirstStageLayers: 15, LastStageLayers: 15},
		"layer_placement_uneven_L80_pp4_first19_last19_novpp": {NumLayers: 80, PP: 4, FirstStageLayers: 19, LastStageLayers: 19},
	}
	for i := range g.Extra {
		p, ok := extra[g.Extra[i].ID]
		if !ok {
			t.Fatalf("unknown extra placement %s", g.Extra[i].ID)
		}
		cases = append(cases, named{g.Extra[i].ID, p, &g.Extra[i]})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stages, err := c.p.Stages()
			if err != nil {
				t.Fatal(err)
			}
			if len(stages) != len(c.want.Stages) {
				t.Fatalf("%d stages; want %d", len(stages), len(c.want.Stages))
			}
			for i, ws := range c.want.Stages {
				got := stages[i]
				if len(got.Chunks) != len(ws.Chunks) {
					t.Fatalf("pp rank %d: %d chunks; want %d", i, len(got.Chunks), len(ws.Chunks))
				}
				for j, wc := range ws.Chunks {
					gc := got.Chunks[j]
					wantVP := -1
					if wc.VPStage != nil {
						wantVP = *wc.VPStage
					}
					if gc.VPStage != wantVP || gc.Offset != wc.Offset || gc.NumLayers != wc.NumLayers || len(wc.Layers) != wc.NumLayers || (wc.NumLayers > 0 && wc.Layers[0] != wc.Offset) {
						t.Errorf("pp rank %d chunk %d: %+v; want vp %v offset %d layers %d (%v)", i, j, gc, wantVP, wc.Offset, wc.NumLayers, wc.Layers)
					}
				}
			}
		})
	}
}
