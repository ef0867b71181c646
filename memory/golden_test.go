package memory

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

// goldenCase is one case of golden/memory_estimates.json, computed by
// running Megatron-LM's and Megatron-Bridge's own estimators.
type goldenCase struct {
	Name  string `json:"name"`
	Model struct {
		NumLayers    int    `json:"num_layers"`
		Hidden       int    `json:"hidden_size"`
		FFN          int    `json:"ffn_hidden_size"`
		Heads        int    `json:"num_attention_heads"`
		Groups       int    `json:"num_query_groups"`
		KV           int    `json:"kv_channels"`
		Vocab        int    `json:"vocab_size"`
		Untie        bool   `json:"untie_embeddings"`
		Norm         string `json:"normalization"`
		SwiGLU       bool   `json:"swiglu"`
		Bias         bool   `json:"add_bias_linear"`
		Experts      int    `json:"num_experts"`
		MoEFFN       int    `json:"moe_ffn_hidden_size"`
		TopK         int    `json:"moe_router_topk"`
		Freq         int    `json:"moe_layer_freq"`
		SharedExpert int    `json:"moe_shared_expert_intermediate_size"`
	} `json:"model"`
	Parallel struct {
		TP, PP, CP, EP, ETP int
		VPP                 int `json:"vpp"`
		First               int `json:"num_layers_in_first_pipeline_stage"`
		Last                int `json:"num_layers_in_last_pipeline_stage"`
	} `json:"parallel"`
	Training struct {
		Seq       int    `json:"seq_length"`
		MBS       int    `json:"micro_batch_size"`
		DistOpt   bool   `json:"use_distributed_optimizer"`
		Recompute string `json:"recompute_granularity"`
		SP        bool   `json:"sequence_parallel"`
		Divisible int    `json:"make_vocab_size_divisible_by"`
	} `json:"training"`
	Derived struct {
		DP  int `json:"data_parallel_size"`
		NMB int `json:"num_microbatches"`
	} `json:"derived"`
	MLM struct {
		WO      float64 `json:"weight_and_optimizer_bytes"`
		ActSP   float64 `json:"activation_bytes_compute_activation_memory"`
		ActNoSP float64 `json:"activation_bytes_compute_activation_memory_without_sp"`
		Act     float64 `json:"activation_bytes"`
		Total   float64 `json:"total_bytes"`
	} `json:"megatron_lm"`
	Bridge map[string]struct {
		WO         float64     `json:"weight_and_optimizer_bytes"`
		Act        float64     `json:"activation_bytes"`
		Total      float64     `json:"total_memory_bytes"`
		Params     float64     `json:"total_parameters"`
		Components []Component `json:"components"`
	} `json:"megatron_bridge"`
}

func (c goldenCase) inputs() Inputs {
	m, p, tr := c.Model, c.Parallel, c.Training
	return Inputs{NumLayers: m.NumLayers, Hidden: m.Hidden, FFN: m.FFN, Heads: m.Heads, QueryGroups: m.Groups, KVChannels: m.KV,
		Vocab: m.Vocab, VocabDivisibleBy: tr.Divisible, Untie: m.Untie, SwiGLU: m.SwiGLU, AddBias: m.Bias, RMSNorm: m.Norm == "RMSNorm",
		NumExperts: m.Experts, MoEFFN: m.MoEFFN, TopK: m.TopK, MoELayerFreq: m.Freq, SharedExpert: m.SharedExpert,
		TP: p.TP, PP: p.PP, VPP: p.VPP, CP: p.CP, EP: p.EP, ETP: p.ETP, DP: c.Derived.DP, FirstStageLayers: p.First, LastStageLayers: p.Last,
		SeqLength: tr.Seq, MicroBatch: tr.MBS, MicroBatches: c.Derived.NMB, DistOptimizer: tr.DistOpt,
		SequenceParallel: tr.SP && p.TP > 1, Recompute: tr.Recompute}
}

// near reports whether got is within a relative 1e-12 of want.
func near(got, want float64) bool {
	if got == want {
		return true
	}
	return math.Abs(got-want) <= 1e-12*math.Abs(want)
}

func readCases(t *testing.T) []goldenCase {
	t.Helper()
	b, err := os.ReadFile("testdata/memory_estimates.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct{ Cases []goldenCase }
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) == 0 {
		t.Fatal("no cases")
	}
	return g.Cases
}

func TestMegatronLMMatchesUpstream(t *testing.T) {
	for _, c := range readCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			in := c.inputs()
			e, err := MegatronLM(in)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []struct {
				name      string
				got, want float64
			}{{"weights and optimizer", e.WeightsAndOptimizerBytes, c.MLM.WO}, {"activations (SP formula)", in.mlmActivationSP(), c.MLM.ActSP},
				{"activations (without SP formula)", in.mlmActivationWithoutSP(), c.MLM.ActNoSP}, {"activations reported", e.ActivationBytes, c.MLM.Act},
				{"total", e.TotalBytes, c.MLM.Total}} {
				if !near(v.got, v.want) {
					t.Errorf("%s: %v; want %v (relative error %.3g)", v.name, v.got, v.want, math.Abs(v.got-v.want)/v.want)
				}
			}
		})
	}
}

func TestBridgeMatchesUpstream(t *testing.T) {
	for _, c := range readCases(t) {
		for variant, want := range c.Bridge {
			t.Run(c.Name+"/"+variant, func(t *testing.T) {
				in := c.inputs()
				in.ShouldPadVocab = variant == "should_pad_vocab_true"
				e, err := Bridge(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range []struct {
					name      string
					got, want float64
				}{{"weights and optimizer", e.WeightsAndOptimizerBytes, want.WO}, {"activations", e.ActivationBytes, want.Act},
					{"total", e.TotalBytes, want.Total}, {"parameters", e.TotalParameters, want.Params}} {
					if !near(v.got, v.want) {
						t.Errorf("%s: %v; want %v", v.name, v.got, v.want)
					}
				}
				if len(e.Components) != len(want.Components) {
					t.Fatalf("components %+v; want %+v", e.Components, want.Components)
				}
				for i, wc := range want.Components {
					gc := e.Components[i]
					if gc.Name != wc.Name || !near(gc.Parameters, wc.Parameters) || !near(gc.ParametersPerGPU, wc.ParametersPerGPU) ||
						gc.BytesPerParameter != wc.BytesPerParameter || !near(gc.Bytes, wc.Bytes) {
						t.Errorf("component %d: %+v; want %+v", i, gc, wc)
					}
				}
			})
		}
	}
}
