package topology

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// Config is everything a plan is made from: the layout, the model, the
// batch and the hardware. Keys are Megatron-LM's argument names in
// snake_case (the same names as golden/*.json inputs); a nil field is
// unset and takes Megatron's default. Flags use the same names in
// kebab-case (--tensor-model-parallel-size), with short aliases.
type Config struct {
	// Layout.
	WorldSize           *int    `key:"world_size" alias:"world" doc:"number of ranks (default nnodes x nproc-per-node)"`
	TP                  *int    `key:"tensor_model_parallel_size" alias:"tp" doc:"tensor-parallel size"`
	PP                  *int    `key:"pipeline_model_parallel_size" alias:"pp" doc:"pipeline-parallel size"`
	VPP                 *int    `key:"virtual_pipeline_model_parallel_size" alias:"vpp,num_virtual_stages_per_pipeline_rank" doc:"virtual pipeline stages per pipeline rank (interleaved schedule)"`
	LayersPerVirtual    *int    `key:"num_layers_per_virtual_pipeline_stage" doc:"layers per virtual pipeline stage (sets the virtual stages)"`
	CP                  *int    `key:"context_parallel_size" alias:"cp" doc:"context-parallel size"`
	EP                  *int    `key:"expert_model_parallel_size" alias:"ep" doc:"expert-parallel size"`
	ETP                 *int    `key:"expert_tensor_parallel_size" alias:"etp" doc:"expert tensor-parallel size (default: tp)"`
	DP                  *int    `key:"data_parallel_size" alias:"dp" doc:"data-parallel size (derived; checked when given)"`
	ExpertDP            *int    `key:"expert_data_parallel_size" alias:"expt_dp" doc:"expert data-parallel size (derived; checked when given)"`
	Order               *string `key:"order" doc:"rank order, fastest first (default tp-cp-ep-dp-pp)"`
	TPPPDPMapping       *bool   `key:"use_tp_pp_dp_mapping" doc:"use the order tp-cp-ep-pp-dp"`
	RankOffset          *int    `key:"rank_offset" doc:"Megatron's rank offset (only 0 is supported)"`
	GTPRemat            *int    `key:"gtp_remat_size" doc:"generalized-TP weight rematerialization (only 1 is supported)"`
	ExpertGTPRemat      *int    `key:"expert_gtp_remat_size" doc:"expert generalized-TP weight rematerialization (only 1 is supported)"`
	DistOptInstances    *int    `key:"num_distributed_optimizer_instances" doc:"distributed-optimizer instances (partial sharding)"`
	FirstStageLayers    *int    `key:"num_layers_in_first_pipeline_stage" alias:"decoder_first_pipeline_num_layers" doc:"layers of the first pipeline stage (uneven pipeline)"`
	LastStageLayers     *int    `key:"num_layers_in_last_pipeline_stage" alias:"decoder_last_pipeline_num_layers" doc:"layers of the last pipeline stage (uneven pipeline)"`
	AccountForEmbedding *bool   `key:"account_for_embedding_in_pipeline_split" doc:"count the embedding as a layer of the first stage"`
	AccountForLoss      *bool   `key:"account_for_loss_in_pipeline_split" doc:"count the loss as a layer of the last stage"`
	OverlapP2P          *bool   `key:"overlap_p2p_comm" doc:"overlap pipeline send/receive (Megatron-LM's default: true)"`
	PipelineDtype       *string `key:"pipeline_dtype" doc:"accepted for compatibility; gorun assumes bf16"`

	// Model.
	NumLayers           *int    `key:"num_layers" doc:"transformer layers"`
	HiddenSize          *int    `key:"hidden_size" doc:"hidden size"`
	FFNHiddenSize       *int    `key:"ffn_hidden_size" doc:"MLP hidden size (default 4 x hidden)"`
	Heads               *int    `key:"num_attention_heads" doc:"attention heads"`
	QueryGroups         *int    `key:"num_query_groups" doc:"key/value groups (GQA; default: heads)"`
	GQA                 *bool   `key:"group_query_attention" doc:"use num_query_groups"`
	KVChannels          *int    `key:"kv_channels" doc:"attention head size (default hidden / heads)"`
	VocabSize           *int    `key:"vocab_size" doc:"vocabulary size"`
	PaddedVocabSize     *int    `key:"padded_vocab_size" alias:"mlm_padded_vocab_size" doc:"vocabulary size after padding (default: padded from vocab_size)"`
	VocabDivisibleBy    *int    `key:"make_vocab_size_divisible_by" doc:"vocabulary padding multiple, times tp (default 128)"`
	ShouldPadVocab      *bool   `key:"should_pad_vocab" doc:"Megatron-Bridge: pad the vocabulary (default false)"`
	Untie               *bool   `key:"untie_embeddings_and_output_weights" alias:"untie_embeddings" doc:"separate input embedding and output layer"`
	Normalization       *string `key:"normalization" doc:"LayerNorm or RMSNorm"`
	SwiGLU              *bool   `key:"swiglu" doc:"SwiGLU MLP (gated, 3 matrices)"`
	AddBiasLinear       *bool   `key:"add_bias_linear" doc:"biases in linear layers"`
	MaxPositions        *int    `key:"max_position_embeddings" doc:"maximum sequence length of the position embedding"`
	NumExperts          *int    `key:"num_experts" alias:"num_moe_experts" doc:"MoE experts"`
	MoEFFNHiddenSize    *int    `key:"moe_ffn_hidden_size" doc:"expert MLP hidden size (default ffn_hidden_size)"`
	MoERouterTopK       *int    `key:"moe_router_topk" doc:"experts per token (default 2)"`
	MoELayerFreq        *int    `key:"moe_layer_freq" doc:"every n-th layer is MoE (default 1)"`
	MoESharedExpertSize *int    `key:"moe_shared_expert_intermediate_size" doc:"shared-expert hidden size"`
	MoESharedExpertGate *bool   `key:"moe_shared_expert_gate" doc:"gate on the shared expert"`
	MoELatentSize       *int    `key:"moe_latent_size" doc:"latent MoE projection size"`
	MTPLayers           *int    `key:"mtp_num_layers" doc:"multi-token-prediction layers"`
	MLA                 *bool   `key:"multi_latent_attention" doc:"multi-latent attention (not modelled by the estimators)"`

	// Batch and training.
	SeqLength        *int    `key:"seq_length" doc:"sequence length"`
	NumMicroBatches  *int    `key:"num_microbatches" doc:"micro-batches per step (derived; checked when given)"`
	Precision        *string `key:"precision" doc:"accepted for compatibility; the estimators assume bf16 weights with fp32 Adam"`
	MicroBatchSize   *int    `key:"micro_batch_size" alias:"mbs" doc:"micro-batch size"`
	GlobalBatchSize  *int    `key:"global_batch_size" alias:"gbs" doc:"global batch size (default micro-batch x dp)"`
	DistOptimizer    *bool   `key:"use_distributed_optimizer" doc:"shard optimizer state over data parallel"`
	SequenceParallel *bool   `key:"sequence_parallel" doc:"sequence parallelism (needs tp > 1)"`
	Recompute        *string `key:"recompute_granularity" doc:"activation recompute: full or selective"`
	RecomputeMethod  *string `key:"recompute_method" doc:"full recompute: uniform or block"`
	RecomputeLayers  *int    `key:"recompute_num_layers" doc:"full recompute: layers per pipeline rank"`
	CPUOffloading    *bool   `key:"cpu_offloading" doc:"offload activations to the CPU"`
	CPUOffloadLayers *int    `key:"cpu_offloading_num_layers" doc:"layers offloaded to the CPU"`

	// Hardware (gorun's).
	NprocPerNode *int    `key:"nproc_per_node" doc:"ranks per node (default 8)"`
	NNodes       *int    `key:"nnodes" doc:"nodes"`
	NVLinkDomain *int    `key:"nvlink_domain_size" doc:"ranks per NVLink domain (default nproc-per-node)"`
	GPU          *string `key:"gpu" doc:"device preset: h100-80gb, h200-141gb, a100-80gb, a100-40gb, b200-180gb, 910b-64gb"`
	GPUMemory    *string `key:"gpu_memory" doc:"device memory, e.g. 80GiB (overrides --gpu)"`
}

// Field is one key of Config.
type Field struct {
	// Key is the snake_case name; Aliases other accepted names.
	Key     string
	Aliases []string
	Doc     string
	// Kind is int, bool, string.
	Kind  reflect.Kind
	index int
}

// Flag is the field's flag name: the key in kebab-case.
func (f Field) Flag() string { return strings.ReplaceAll(f.Key, "_", "-") }

// Fields lists Config's keys in declaration order.
func Fields() []Field {
	t := reflect.TypeFor[Config]()
	var out []Field
	for i := range t.NumField() {
		sf := t.Field(i)
		f := Field{Key: sf.Tag.Get("key"), Doc: sf.Tag.Get("doc"), Kind: sf.Type.Elem().Kind(), index: i}
		if a := sf.Tag.Get("alias"); a != "" {
			f.Aliases = strings.Split(a, ",")
		}
		out = append(out, f)
	}
	return out
}

// lookupField finds a field by key or alias.
func lookupField(name string) (Field, bool) {
	for _, f := range Fields() {
		if f.Key == name {
			return f, true
		}
		for _, a := range f.Aliases {
			if a == name {
				return f, true
			}
		}
	}
	return Field{}, false
}

// value returns the field's pointer in c.
func (f Field) value(c *Config) reflect.Value { return reflect.ValueOf(c).Elem().Field(f.index) }

// Set sets the field named name (a key or an alias) from a Go value: an
// int, bool or string as the field's kind wants, or nil to unset it.
func (c *Config) Set(name string, v any) error {
	f, ok := lookupField(name)
	if !ok {
		return unknownKey(name)
	}
	field := f.value(c)
	if v == nil {
		field.SetZero()
		return nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != f.Kind {
		return fmt.Errorf("%s: want %s, got %v (%T)", name, kindWord(f.Kind), v, v)
	}
	p := reflect.New(field.Type().Elem())
	p.Elem().Set(rv.Convert(field.Type().Elem()))
	field.Set(p)
	return nil
}

// Get returns the field's value (nil when unset) by key or alias.
func (c *Config) Get(name string) any {
	f, ok := lookupField(name)
	if !ok {
		return nil
	}
	v := f.value(c)
	if v.IsNil() {
		return nil
	}
	return v.Elem().Interface()
}

// Merge sets every field that other sets (flags over a file).
func (c *Config) Merge(other *Config) {
	for _, f := range Fields() {
		if v := f.value(other); !v.IsNil() {
			f.value(c).Set(v)
		}
	}
}

// Values lists the set fields as key: value, for output.
func (c *Config) Values() map[string]any {
	out := map[string]any{}
	for _, f := range Fields() {
		if v := f.value(c); !v.IsNil() {
			out[f.Key] = v.Elem().Interface()
		}
	}
	return out
}

func kindWord(k reflect.Kind) string {
	switch k {
	case reflect.Int:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	}
	return "a string"
}

// unknownKey names the closest known keys.
func unknownKey(name string) error {
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	for _, f := range Fields() {
		for _, n := range append([]string{f.Key}, f.Aliases...) {
			cs = append(cs, cand{n, editDistance(name, n)})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	if len(cs) > 0 && cs[0].d <= max(2, len(name)/3) {
		return fmt.Errorf("unknown key %q: did you mean %q?", name, cs[0].name)
	}
	return fmt.Errorf("unknown key %q (gorun plan --help lists the keys)", name)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
