package topology

import (
	"encoding/json"
	"strings"
	"testing"
)

// base is a valid small job; each rule test changes a few keys.
const base = `world_size: 16
nproc_per_node: 8
tensor_model_parallel_size: 2
pipeline_model_parallel_size: 2
num_layers: 8
hidden_size: 1024
num_attention_heads: 16
ffn_hidden_size: 4096
vocab_size: 32000
seq_length: 2048
micro_batch_size: 1
global_batch_size: 16
`

func TestBaseIsValid(t *testing.T) {
	c, err := ParseYAML("base", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if issues := Validate(c); len(issues) != 0 {
		t.Fatalf("base config: %v", issues)
	}
}

func TestRules(t *testing.T) {
	tests := []struct {
		rule     string
		severity Severity
		yaml     string // keys over base
		mention  string // a value the message must name
	}{
		{"world-size-unknown", Error, "world_size: null", "world_size"},
		{"world-size-mismatch", Error, "nnodes: 3", "nnodes 3"},
		{"world-size-limit", Error, "world_size: 4194304", "4194304"},
		{"size-above-world", Error, "tensor_model_parallel_size: 32", "32"},
		{"world-divisible", Error, "tensor_model_parallel_size: 3", "tp x pp x cp = 3 x 2 x 1 = 6"},
		{"expert-world-divisible", Error, "expert_model_parallel_size: 3\nnum_experts: 6", "etp x ep x pp"},
		{"dp-mismatch", Error, "data_parallel_size: 8", "data_parallel_size 8"},
		{"order", Error, "context_parallel_size: 2\norder: tp-dp-pp", "cp"},
		{"order", Error, "order: tp-xx-dp-pp", "xx"},
		{"distopt-instances", Error, "num_distributed_optimizer_instances: 3", "num_distributed_optimizer_instances 3"},
		{"unsupported", Error, "rank_offset: 8", "rank_offset 8"},
		{"positive", Error, "micro_batch_size: 0", "micro_batch_size"},
		{"vpp-needs-pp", Error, "pipeline_model_parallel_size: 1\nvirtual_pipeline_model_parallel_size: 2", "above 1"},
		{"vpp-above-layers", Error, "virtual_pipeline_model_parallel_size: 9", "9"},
		{"layers-divisible-by-pp", Error, "num_layers: 9", "num_layers 9"},
		{"layers-per-rank-divisible-by-vpp", Error, "virtual_pipeline_model_parallel_size: 3", "4 layers per pipeline rank"},
		{"layers-per-virtual-stage", Error, "num_layers_per_virtual_pipeline_stage: 3", "3"},
		{"uneven-needs-virtual-stages", Error, "num_layers_per_virtual_pipeline_stage: 2\nnum_layers_in_first_pipeline_stage: 4", "virtual"},
		{"uneven-needs-pp", Error, "pipeline_model_parallel_size: 1\nnum_layers_in_first_pipeline_stage: 4", "above 1"},
		{"uneven-first-vs-vpp", Error, "pipeline_model_parallel_size: 4\nworld_size: 32\nnum_layers: 16\nvirtual_pipeline_model_parallel_size: 2\nnum_layers_in_first_pipeline_stage: 3\nnum_layers_in_last_pipeline_stage: 3", "first_pipeline_stage 3"},
		{"uneven-too-many", Error, "num_layers_in_first_pipeline_stage: 6\nnum_layers_in_last_pipeline_stage: 6", "exceed"},
		{"uneven-middle-divisible", Error, "pipeline_model_parallel_size: 4\nworld_size: 32\nnum_layers_in_first_pipeline_stage: 1\nnum_layers_in_last_pipeline_stage: 2", "5 middle layers"},
		{"layers-divisible-by-pp", Error, "account_for_embedding_in_pipeline_split: true", "embedding/loss"},
		{"heads-divisible-by-tp", Error, "num_attention_heads: 15\nhidden_size: 1020", "num_attention_heads 15"},
		{"ffn-divisible-by-tp", Error, "ffn_hidden_size: 4095", "ffn_hidden_size 4095"},
		{"max-positions", Error, "max_position_embeddings: 1024", "1024"},
		{"normalization", Error, "normalization: BatchNorm", "BatchNorm"},
		{"seq-divisible-by-tp", Error, "sequence_parallel: true\nseq_length: 2047", "2047"},
		{"mla-not-modelled", Warning, "multi_latent_attention: true", "standard attention"},
		{"topk-vs-experts", Error, "num_experts: 4\nmoe_router_topk: 8", "moe_router_topk 8"},
		{"moe-ffn-divisible-by-etp", Error, "num_experts: 4\nmoe_ffn_hidden_size: 1001", "1001"},
		{"ep-tp-without-sp", Warning, "num_experts: 4\nexpert_model_parallel_size: 2", "sequence_parallel"},
		{"microbatches-mismatch", Error, "num_microbatches: 3", "gives 4"},
		{"global-batch-divisible", Error, "global_batch_size: 6", "global_batch_size 6"},
		{"cpu-offload-layers", Error, "pipeline_model_parallel_size: 1\ncpu_offloading: true\ncpu_offloading_num_layers: 8", "0 to 7"},
		{"cpu-offload-with-pp", Error, "cpu_offloading_num_layers: 2", "pipeline"},
		{"recompute-selective-layers", Error, "recompute_granularity: selective\nrecompute_num_layers: 2", "selective"},
		{"recompute-granularity", Error, "recompute_granularity: partial", "partial"},
		{"recompute-full-layers", Error, "recompute_granularity: full\nrecompute_method: uniform\nrecompute_num_layers: 5", "1 to the 4 layers"},
		{"tp-across-domains", Warning, "tensor_model_parallel_size: 8\nnvlink_domain_size: 4", "NVLink domains of 4"},
		{"tp-across-domains", Warning, "num_experts: 8\nexpert_model_parallel_size: 8\nexpert_tensor_parallel_size: 1\nnproc_per_node: 4\nsequence_parallel: true", "expert tensor x expert-parallel"},
	}
	for _, tt := range tests {
		t.Run(tt.rule+"/"+strings.ReplaceAll(tt.yaml, "\n", ","), func(t *testing.T) {
			c, err := ParseYAML("base", []byte(base))
			if err != nil {
				t.Fatal(err)
			}
			over, err := ParseYAML("test", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			c.Merge(over)
			if strings.Contains(tt.yaml, "world_size: null") {
				c.WorldSize = nil
			}
			var found *Issue
			issues := Validate(c)
			for i := range issues {
				if issues[i].Rule == tt.rule && issues[i].Severity == tt.severity {
					found = &issues[i]
				}
			}
			dump, _ := json.Marshal(issues)
			if found == nil {
				t.Fatalf("no %s %s; got %s", tt.severity, tt.rule, dump)
			}
			if !strings.Contains(found.Message, tt.mention) {
				t.Errorf("message %q does not name %q", found.Message, tt.mention)
			}
		})
	}
}

func TestUnknownKeySuggestsTheClosest(t *testing.T) {
	_, err := ParseYAML("job.yaml", []byte("tensr_model_parallel_size: 2\n"))
	if err == nil || !strings.Contains(err.Error(), `job.yaml: line 1: unknown key "tensr_model_parallel_size": did you mean "tensor_model_parallel_size"?`) {
		t.Fatalf("err = %v", err)
	}
}

func TestParseYAMLErrors(t *testing.T) {
	tests := []struct{ yaml, want string }{
		{"tp: four\n", `line 1: tp: want an integer, got "four"`},
		{"swiglu: maybe\n", `want true or false`},
		{"tp: [1, 2]\n", `want a single value`},
		{"- a\n- b\n", `want a mapping`},
		{"tp: 2\ntensor_model_parallel_size: 4\n", `line 2: tensor_model_parallel_size is already set on line 1`},
		{"tp: 2\n  pp: [\n", `yaml:`},
	}
	for _, tt := range tests {
		_, err := ParseYAML("x.yaml", []byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseYAML(%q) = %v; want %q", tt.yaml, err, tt.want)
		}
	}
}
