package topology

import "fmt"

// pipeline: the layers split over the pipeline (and virtual) stages.
func (k *checker) pipeline() {
	c, s := k.c, k.s
	L, pp, vpp := s.NumLayers, s.PP, s.VPP
	if vpp > 0 && pp == 1 {
		k.fail("vpp-needs-pp", fmt.Sprintf("virtual pipeline stages (%d) need pipeline_model_parallel_size above 1", vpp), "virtual_pipeline_model_parallel_size", vpp, "pipeline_model_parallel_size", pp)
		return
	}
	if L == 0 {
		return // nothing to split
	}
	lpv := c.LayersPerVirtual != nil
	if c.VPP != nil && lpv {
		k.fail("vpp-knobs", "set either virtual_pipeline_model_parallel_size or num_layers_per_virtual_pipeline_stage, not both",
			"virtual_pipeline_model_parallel_size", *c.VPP, "num_layers_per_virtual_pipeline_stage", *c.LayersPerVirtual)
	}
	if lpv {
		n := *c.LayersPerVirtual
		if L%pp != 0 {
			k.fail("layers-divisible-by-pp", fmt.Sprintf("num_layers %d is not a multiple of pipeline_model_parallel_size %d", L, pp), "num_layers", L, "pipeline_model_parallel_size", pp)
			return
		}
		if (L/pp)%n != 0 {
			k.fail("layers-per-virtual-stage", fmt.Sprintf("%d layers per pipeline rank are not a multiple of num_layers_per_virtual_pipeline_stage %d", L/pp, n),
				"num_layers", L, "pipeline_model_parallel_size", pp, "num_layers_per_virtual_pipeline_stage", n)
			return
		}
	}
	if vpp > 0 && !boolOr(c.OverlapP2P, true) && pp <= 2 {
		k.fail("vpp-no-overlap-pp", fmt.Sprintf("virtual pipeline stages without overlap_p2p_comm need pipeline_model_parallel_size above 2 (got %d): two ranks would exchange several sends and receives per batch", pp),
			"pipeline_model_parallel_size", pp, "overlap_p2p_comm", false)
	}
	account := 0
	if s.AccountForEmbedding {
		account++
	}
	if s.AccountForLoss {
		account++
	}
	first, last := s.FirstStageLayers, s.LastStageLayers
	switch {
	case c.FirstStageLayers != nil || c.LastStageLayers != nil:
		k.uneven(first, last, account, lpv)
	case account > 0:
		total := L + account
		if total%pp != 0 {
			k.fail("layers-divisible-by-pp", fmt.Sprintf("num_layers %d plus %d counted for the embedding/loss is not a multiple of pipeline_model_parallel_size %d", L, account, pp), "num_layers", L, "pipeline_model_parallel_size", pp)
		} else if vpp > 0 && (total/pp)%vpp != 0 {
			k.fail("layers-per-rank-divisible-by-vpp", fmt.Sprintf("%d layers per pipeline rank (embedding/loss counted) are not a multiple of virtual_pipeline_model_parallel_size %d", total/pp, vpp),
				"num_layers", L, "pipeline_model_parallel_size", pp, "virtual_pipeline_model_parallel_size", vpp)
		}
	default:
		if L%pp != 0 {
			k.fail("layers-divisible-by-pp", fmt.Sprintf("num_layers %d is not a multiple of pipeline_model_parallel_size %d", L, pp), "num_layers", L, "pipeline_model_parallel_size", pp)
		} else if vpp > 0 && (L/pp)%vpp != 0 {
			k.fail("layers-per-rank-divisible-by-vpp", fmt.Sprintf("%d layers per pipeline rank are not a multiple of virtual_pipeline_model_parallel_size %d", L/pp, vpp),
				"num_layers", L, "pipeline_model_parallel_size", pp, "virtual_pipeline_model_parallel_size", vpp)
		}
	}
}

// uneven: fixed first/last stage sizes.
func (k *checker) uneven(first, last, account int, lpv bool) {
	s := k.s
	L, pp, vpp := s.NumLayers, s.PP, s.VPP
	if lpv {
		k.fail("uneven-needs-virtual-stages", "an uneven pipeline takes its virtual stages from virtual_pipeline_model_parallel_size, not num_layers_per_virtual_pipeline_stage")
	}
	if account > 0 {
		k.fail("uneven-with-account-for", "num_layers_in_first/last_pipeline_stage cannot be combined with account_for_embedding/loss_in_pipeline_split")
		return
	}
	if pp == 1 {
		k.fail("uneven-needs-pp", "num_layers_in_first/last_pipeline_stage need pipeline_model_parallel_size above 1", "pipeline_model_parallel_size", pp)
		return
	}
	if first < 0 || last < 0 || k.has(Error) {
		return
	}
	if vpp > 0 && first%vpp != 0 {
		k.fail("uneven-first-vs-vpp", fmt.Sprintf("num_layers_in_first_pipeline_stage %d is not a multiple of virtual_pipeline_model_parallel_size %d", first, vpp), "num_layers_in_first_pipeline_stage", first, "virtual_pipeline_model_parallel_size", vpp)
	}
	if vpp > 0 && last%vpp != 0 {
		k.fail("uneven-last-vs-vpp", fmt.Sprintf("num_layers_in_last_pipeline_stage %d is not a multiple of virtual_pipeline_model_parallel_size %d", last, vpp), "num_layers_in_last_pipeline_stage", last, "virtual_pipeline_model_parallel_size", vpp)
	}
	middleStages := pp
	if first > 0 {
		middleStages--
	}
	if last > 0 {
		middleStages--
	}
	middle := L - first - last
	switch {
	case middle < 0:
		k.fail("uneven-too-many", fmt.Sprintf("first %d + last %d stage layers exceed num_layers %d", first, last, L), "num_layers", L)
	case (middle == 0) != (middleStages == 0):
		k.fail("uneven-middle-mismatch", fmt.Sprintf("%d layers are left for %d middle pipeline stages", middle, middleStages),
			"num_layers", L, "num_layers_in_first_pipeline_stage", first, "num_layers_in_last_pipeline_stage", last, "pipeline_model_parallel_size", pp)
	case middleStages > 0 && middle%middleStages != 0:
		k.fail("uneven-middle-divisible", fmt.Sprintf("%d middle layers do not split evenly over %d middle pipeline stages", middle, middleStages),
			"num_layers", L, "num_layers_in_first_pipeline_stage", first, "num_layers_in_last_pipeline_stage", last, "pipeline_model_parallel_size", pp)
	case middleStages > 0 && vpp > 0 && (middle/middleStages)%vpp != 0:
		k.fail("layers-per-middle-rank-divisible-by-vpp", fmt.Sprintf("%d layers per middle pipeline rank are not a multiple of virtual_pipeline_model_parallel_size %d", middle/middleStages, vpp),
			"num_layers", L, "num_layers_in_first_pipeline_stage", first, "num_layers_in_last_pipeline_stage", last, "virtual_pipeline_model_parallel_size", vpp)
	}
}

// model: the model's shape against TP, CP and the sequence.
func (k *checker) model() {
	c, s := k.c, k.s
	if s.Heads > 0 && s.Heads%s.TP != 0 {
		k.fail("heads-divisible-by-tp", fmt.Sprintf("num_attention_heads %d is not a multiple of tensor_model_parallel_size %d", s.Heads, s.TP), "num_attention_heads", s.Heads, "tensor_model_parallel_size", s.TP)
	}
	if g := s.QueryGroups; g > 0 && g%s.TP != 0 && s.TP%g != 0 {
		k.fail("query-groups-vs-tp", fmt.Sprintf("num_query_groups %d is neither a multiple nor a divisor of tensor_model_parallel_size %d", g, s.TP), "num_query_groups", g, "tensor_model_parallel_size", s.TP)
	}
	if c.KVChannels == nil && s.Heads > 0 && s.Hidden%s.Heads != 0 {
		k.fail("hidden-divisible-by-heads", fmt.Sprintf("hidden_size %d is not a multiple of num_attention_heads %d (or set kv_channels)", s.Hidden, s.Heads), "hidden_size", s.Hidden, "num_attention_heads", s.Heads)
	}
	if s.FFN > 0 && s.FFN%s.TP != 0 {
		k.fail("ffn-divisible-by-tp", fmt.Sprintf("ffn_hidden_size %d is not a multiple of tensor_model_parallel_size %d", s.FFN, s.TP), "ffn_hidden_size", s.FFN, "tensor_model_parallel_size", s.TP)
	}
	if boolOr(c.SequenceParallel, false) && s.TP == 1 {
		k.warn("sp-without-tp", "sequence_parallel is off: it needs tensor_model_parallel_size above 1", "sequence_parallel", true, "tensor_model_parallel_size", 1)
	}
	if seq := s.SeqLength; seq > 0 {
		if s.CP > 1 && seq%(2*s.CP) != 0 {
			k.fail("seq-divisible-by-2cp", fmt.Sprintf("seq_length %d is not a multiple of 2 x context_parallel_size = %d", seq, 2*s.CP), "seq_length", seq, "context_parallel_size", s.CP)
		} else if s.SequenceParallel && (seq/s.CP)%s.TP != 0 {
			k.fail("seq-divisible-by-tp", fmt.Sprintf("with sequence parallelism the sequence per context-parallel rank (%d) must be a multiple of tensor_model_parallel_size %d", seq/s.CP, s.TP),
				"seq_length", seq, "context_parallel_size", s.CP, "tensor_model_parallel_size", s.TP)
		}
		if c.MaxPositions != nil && *c.MaxPositions < seq {
			k.fail("max-positions", fmt.Sprintf("max_position_embeddings %d is below seq_length %d", *c.MaxPositions, seq), "max_position_embeddings", *c.MaxPositions, "seq_length", seq)
		}
	}
	if n := strOr(c.Normalization, "LayerNorm"); n != "LayerNorm" && n != "RMSNorm" {
		k.fail("normalization", fmt.Sprintf("normalization %q: want LayerNorm or RMSNorm", n), "normalization", n)
	}
	if boolOr(c.MLA, false) {
		k.warn("mla-not-modelled", "multi_latent_attention: the memory estimates count standard attention")
	}
}

// experts: MoE settings against EP and ETP.
func (k *checker) experts() {
	c, s := k.c, k.s
	if s.EP > 1 && s.TP > 1 && !s.SequenceParallel {
		k.warn("ep-tp-without-sp", "expert and tensor parallelism together should use sequence_parallel", "expert_model_parallel_size", s.EP, "tensor_model_parallel_size", s.TP)
	}
	if c.NumExperts != nil && *c.NumExperts <= 0 {
		k.fail("experts-positive", fmt.Sprintf("num_experts %d: want at least 1, or leave it unset for a dense model", *c.NumExperts), "num_experts", *c.NumExperts)
		return
	}
	if s.EP > 1 && s.NumExperts == 0 {
		if s.NumLayers == 0 && s.Hidden == 0 {
			// A layout without a model: Megatron Core builds its groups.
			k.warn("ep-needs-experts", fmt.Sprintf("expert_model_parallel_size %d: the model (num_experts) is not described", s.EP), "expert_model_parallel_size", s.EP)
			return
		}
		k.fail("ep-needs-experts", fmt.Sprintf("expert_model_parallel_size %d needs num_experts", s.EP), "expert_model_parallel_size", s.EP)
		return
	}
	if s.NumExperts == 0 {
		return
	}
	if s.NumExperts%s.EP != 0 {
		k.fail("experts-divisible-by-ep", fmt.Sprintf("num_experts %d is not a multiple of expert_model_parallel_size %d", s.NumExperts, s.EP), "num_experts", s.NumExperts, "expert_model_parallel_size", s.EP)
	}
	if s.TopK > s.NumExperts {
		k.fail("topk-vs-experts", fmt.Sprintf("moe_router_topk %d exceeds num_experts %d", s.TopK, s.NumExperts), "moe_router_topk", s.TopK, "num_experts", s.NumExperts)
	}
	if s.MoEFFN > 0 && s.MoEFFN%s.ETP != 0 {
		k.fail("moe-ffn-divisible-by-etp", fmt.Sprintf("moe_ffn_hidden_size %d is not a multiple of expert_tensor_parallel_size %d", s.MoEFFN, s.ETP), "moe_ffn_hidden_size", s.MoEFFN, "expert_tensor_parallel_size", s.ETP)
	}
}

// batch: the global batch splits into whole micro-batches per data rank.
func (k *checker) batch() {
	c, s := k.c, k.s
	if c.GlobalBatchSize == nil {
		return
	}
	dp := s.DP()
	if dp < 1 || s.MicroBatch < 1 {
		return // a world smaller than TP x PP x CP: the world rule says so
	}
	if c.NumMicroBatches != nil && s.GlobalBatch%(s.MicroBatch*dp) == 0 && *c.NumMicroBatches != s.MicroBatches() {
		k.fail("microbatches-mismatch", fmt.Sprintf("num_microbatches %d, but global_batch_size %d / (micro_batch_size %d x dp %d) gives %d", *c.NumMicroBatches, s.GlobalBatch, s.MicroBatch, dp, s.MicroBatches()),
			"num_microbatches", *c.NumMicroBatches)
	}
	if s.GlobalBatch%(s.MicroBatch*dp) != 0 {
		k.fail("global-batch-divisible", fmt.Sprintf("global_batch_size %d is not a multiple of micro_batch_size %d x data-parallel size %d = %d", s.GlobalBatch, s.MicroBatch, dp, s.MicroBatch*dp),
			"global_batch_size", s.GlobalBatch, "micro_batch_size", s.MicroBatch, "data_parallel_size", dp)
	}
}

// recompute: activation recompute and CPU offloading settings.
func (k *checker) recompute() {
	c, s := k.c, k.s
	offload := boolOr(c.CPUOffloading, false) || intOr(c.CPUOffloadLayers, 0) > 0
	if offload {
		if n := intOr(c.CPUOffloadLayers, 0); n < 0 || (s.NumLayers > 0 && n >= s.NumLayers) {
			k.fail("cpu-offload-layers", fmt.Sprintf("cpu_offloading_num_layers %d: want 0 to %d (fewer than num_layers)", n, s.NumLayers-1), "cpu_offloading_num_layers", n, "num_layers", s.NumLayers)
		}
		if s.PP > 1 {
			k.fail("cpu-offload-with-pp", fmt.Sprintf("CPU offloading does not work with pipeline parallelism (pipeline_model_parallel_size %d)", s.PP), "cpu_offloading", true, "pipeline_model_parallel_size", s.PP)
		}
		if s.Recompute != "" {
			k.fail("cpu-offload-with-recompute", fmt.Sprintf("CPU offloading does not work with activation recompute (recompute_granularity %s)", s.Recompute), "cpu_offloading", true, "recompute_granularity", s.Recompute)
		}
	}
	switch s.Recompute {
	case "":
	case "selective":
		if c.RecomputeLayers != nil {
			k.fail("recompute-selective-layers", "recompute_num_layers applies to full recompute only; leave it unset with selective", "recompute_num_layers", *c.RecomputeLayers)
		}
	case "full":
		if m := strOr(c.RecomputeMethod, ""); m != "uniform" && m != "block" {
			k.fail("recompute-full-method", fmt.Sprintf("full recompute needs recompute_method uniform or block (got %q)", m), "recompute_method", m)
		}
		perRank := s.NumLayers / max(s.PP, 1)
		if n := intOr(c.RecomputeLayers, 0); n < 1 || (perRank > 0 && n > perRank) {
			k.fail("recompute-full-layers", fmt.Sprintf("full recompute needs recompute_num_layers from 1 to the %d layers per pipeline rank (got %d)", perRank, n), "recompute_num_layers", n)
		}
	default:
		k.fail("recompute-granularity", fmt.Sprintf("recompute_granularity %q: want full or selective", s.Recompute), "recompute_granularity", s.Recompute)
	}
}

// placement: tensor-parallel groups should stay inside one NVLink domain.
func (k *checker) placement() {
	s := k.s
	r, err := NewRanks(s.Layout())
	if err != nil || s.NVLinkDomain < 1 {
		return
	}
	for _, check := range []struct{ kind, what string }{{"tp", "tensor-parallel"}, {"tp_ep", "expert tensor x expert-parallel"}} {
		for _, g := range r.Groups(check.kind) {
			if len(g) < 2 {
				break
			}
			if spans(g, s.NVLinkDomain) {
				k.warn("tp-across-domains", fmt.Sprintf("%s groups of %d ranks span NVLink domains of %d ranks (e.g. %v): their traffic crosses the slower inter-node network", check.what, len(g), s.NVLinkDomain, sample(g)),
					"group", check.kind, "group_size", len(g), "nvlink_domain_size", s.NVLinkDomain)
				break
			}
		}
	}
}

func spans(g []int, domain int) bool {
	for _, r := range g {
		if r/domain != g[0]/domain {
			return true
		}
	}
	return false
}

func sample(g []int) []int {
	if len(g) > 8 {
		return g[:8]
	}
	return g
}
