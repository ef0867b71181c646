package topology

import (
	"fmt"

	"github.com/gorun-dev/gorun/memory"
)

// Recommendation is one step of the memory advice, in the order of
// docs/sources.md's decision list (memory tuning), with its measured cost and, where the
// estimators model it, the re-estimated total.
type Recommendation struct {
	Step    int            `json:"step"`
	Action  string         `json:"action"`
	Changes map[string]any `json:"changes,omitempty"`
	// Estimated says whether the change was re-estimated; if so,
	// TotalBytes is the new estimate and SavesBytes the difference.
	Estimated  bool    `json:"estimated"`
	TotalBytes float64 `json:"estimated_total_bytes,omitempty"`
	SavesBytes float64 `json:"saves_bytes,omitempty"`
	Fits       *bool   `json:"fits,omitempty"`
	Cost       string  `json:"cost"`
}

// thinHeadroom is the share of the capacity below which the headroom
// counts as thin: the estimate leaves out fragmentation and workspaces.
const thinHeadroom = 0.10

// advise recommends, when the estimate exceeds the capacity or leaves
// thin headroom, the seeds' steps in order, each re-estimated where the
// estimators can.
func advise(c *Config, s Spec, estimator string, capacity float64, est memory.Estimate) []Recommendation {
	out := []Recommendation{}
	if capacity <= 0 || est.TotalBytes < capacity*(1-thinHeadroom) {
		return out
	}
	add := func(r Recommendation) {
		r.Step = len(out) + 1
		out = append(out, r)
	}
	add(Recommendation{Action: "keep PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (gorun sets it unless --no-memory-defaults or --use-nccl-ub): most out-of-memory errors come from fragmentation, which the estimate leaves out",
		Cost: "no throughput cost measured; incompatible with NCCL user buffers (--use-nccl-ub)"})
	if s.SequenceParallel {
		add(Recommendation{Action: "if you fine-tune with LoRA: enable LoRA input regather with sequence parallelism (keeps only the sequence-local shard of the gathered LoRA-A input)",
			Cost: "measured: 10.0% less peak memory and -6.74% throughput on Qwen3-8B TP2, 5.2% and -2.89% on Qwen3-30B-A3B TP4/EP4, 1.6% and -0.34% on GPT-OSS-120B TP2/EP8 (not modelled by the estimate)"})
	}
	try := func(action, cost string, kv ...any) {
		changed := *c
		changes := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			if err := changed.Set(kv[i].(string), kv[i+1]); err != nil {
				return
			}
			changes[kv[i].(string)] = kv[i+1]
		}
		for _, i := range Validate(&changed) {
			if i.Severity == Error {
				return // the change does not make a valid layout
			}
		}
		cs := changed.Resolve()
		e, err := estimate(&changed, cs, estimator)
		if err != nil {
			return
		}
		fits := e.TotalBytes <= capacity
		add(Recommendation{Action: action, Changes: changes, Estimated: true, TotalBytes: e.TotalBytes,
			SavesBytes: est.TotalBytes - e.TotalBytes, Fits: &fits, Cost: cost})
	}
	if s.Recompute == "" {
		try("recompute activations selectively (core_attn)", "small: only the attention core is recomputed",
			"recompute_granularity", "selective")
	}
	if !s.DistOptimizer {
		try("use the distributed optimizer (shards the fp32 master weights and Adam moments over data parallel)", "about 1-2% throughput",
			"use_distributed_optimizer", true)
	}
	if s.DP()%2 == 0 {
		try(fmt.Sprintf("double pipeline parallelism to %d (data parallel halves to %d; add nodes instead to keep it)", 2*s.PP, s.DP()/2),
			"about 6% throughput when data parallel halves (Llama3 70B: PP8 DP1 668 vs 710 TFLOP/s/GPU); keeping DP with more nodes costs little",
			"pipeline_model_parallel_size", 2*s.PP)
	}
	if s.DP()%2 == 0 && 2*s.TP <= s.NVLinkDomain {
		try(fmt.Sprintf("last resort: double tensor parallelism to %d", 2*s.TP),
			"severe: -28% throughput on Llama3 70B (TP8: 508.7 vs 709.9 TFLOP/s/GPU) from the extra NVLink all-reduce traffic",
			"tensor_model_parallel_size", 2*s.TP)
	}
	if s.PP > 1 {
		add(Recommendation{Action: "do not offload activations to the CPU: Megatron does not support CPU offloading with pipeline parallelism", Cost: "n/a"})
	}
	return out
}
