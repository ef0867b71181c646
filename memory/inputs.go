package memory

import "fmt"

// Inputs is what the estimators need: the model's shape, the parallel
// layout and the batch. Sizes of 0 mean "not used" (no experts, no
// virtual pipeline, ...).
type Inputs struct {
	NumLayers, Hidden, FFN, Heads, QueryGroups, KVChannels int
	// Vocab is the tokenizer's vocabulary; PaddedVocab, if set, is
	// Megatron-LM's padded size (else it is padded to a multiple of
	// VocabDivisibleBy x TP).
	Vocab, PaddedVocab, VocabDivisibleBy int
	// ShouldPadVocab pads the vocabulary in the Bridge estimate too
	// (GPTModelProvider's default is false).
	ShouldPadVocab                  bool
	Untie, SwiGLU, AddBias, RMSNorm bool

	NumExperts, MoEFFN, TopK, MoELayerFreq, SharedExpert int
	SharedExpertGate                                     bool
	LatentSize, MTPLayers                                int

	TP, PP, VPP, CP, EP, ETP, DP      int
	FirstStageLayers, LastStageLayers int

	SeqLength, MicroBatch int
	// MicroBatches is global batch / (micro batch x DP); 0 when unknown.
	MicroBatches                    int
	DistOptimizer, SequenceParallel bool
	// Recompute is "", "selective" or "full".
	Recompute string
}

// check refuses inputs the formulas cannot use.
func (in Inputs) check() error {
	for _, v := range []struct {
		name string
		n    int
	}{{"num_layers", in.NumLayers}, {"hidden_size", in.Hidden}, {"num_attention_heads", in.Heads}, {"seq_length", in.SeqLength},
		{"vocab_size", max(in.Vocab, in.PaddedVocab)}, {"micro_batch_size", in.MicroBatch},
		{"tensor_model_parallel_size", in.TP}, {"pipeline_model_parallel_size", in.PP}, {"context_parallel_size", in.CP},
		{"expert_model_parallel_size", in.EP}, {"expert_tensor_parallel_size", in.ETP}, {"data_parallel_size", in.DP}} {
		if v.n < 1 {
			return fmt.Errorf("memory estimate: %s is %d: the estimate needs it (at least 1)", v.name, v.n)
		}
	}
	return nil
}

// paddedVocab is Megatron-LM's padded vocabulary: a multiple of
// VocabDivisibleBy x TP.
func (in Inputs) paddedVocab() int {
	if in.PaddedVocab > 0 {
		return in.PaddedVocab
	}
	m := max(in.VocabDivisibleBy, 1) * in.TP
	return (in.Vocab + m - 1) / m * m
}

// attention is the parameters of one attention block, as both estimators
// count them: 2 h h ((1 + g/a) (d a / h)), queries and output plus keys
// and values of g groups (GQA), no biases.
func (in Inputs) attention() float64 {
	groups := in.QueryGroups
	if groups == 0 {
		groups = in.Heads
	}
	kv := in.KVChannels
	if kv == 0 {
		kv = in.Hidden / in.Heads
	}
	ratio := float64(kv*in.Heads) / float64(in.Hidden)
	return float64(2*in.Hidden*in.Hidden) * ((1 + float64(groups)/float64(in.Heads)) * ratio)
}

// moePattern marks the MoE layers (every MoELayerFreq-th, from layer 0),
// with the MTP layers, of the type of the last layer, after them.
func (in Inputs) moePattern() []bool {
	p := make([]bool, in.NumLayers)
	if in.NumExperts > 0 {
		freq := max(in.MoELayerFreq, 1)
		for i := range p {
			p[i] = i%freq == 0
		}
	}
	return p
}

// Component is one part of the weights and optimizer state.
type Component struct {
	Name              string  `json:"name"`
	Parameters        float64 `json:"parameter_count"`
	ParametersPerGPU  float64 `json:"parameter_count_per_gpu"`
	BytesPerParameter float64 `json:"bytes_per_parameter"`
	Bytes             float64 `json:"memory_bytes"`
}

// Estimate is the memory of the most loaded GPU, in bytes.
type Estimate struct {
	Estimator                string      `json:"estimator"`
	WeightsAndOptimizerBytes float64     `json:"weights_and_optimizer_bytes"`
	ActivationBytes          float64     `json:"activation_bytes"`
	TotalBytes               float64     `json:"total_bytes"`
	Components               []Component `json:"components"`
	TotalParameters          float64     `json:"total_parameters"`
	// ActivationFormula names the activation formula used.
	ActivationFormula string   `json:"activation_formula"`
	Assumptions       []string `json:"assumptions"`
}

// bytesPerParameter is the Adam estimate shared by both estimators: bf16
// weights and fp32 gradients (6 B) always, fp32 master weights and two
// moments (12 B) sharded over n ranks by the distributed optimizer.
func bytesPerParameter(distOpt bool, n float64) float64 {
	if !distOpt {
		return 18
	}
	return 6 + 12/n
}
