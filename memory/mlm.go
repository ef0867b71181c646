package memory

import "math"

// EstimatorMegatronLM and EstimatorBridge name the estimators.
const (
	EstimatorMegatronLM = "megatron-lm"
	EstimatorBridge     = "bridge"
)

// mlmParams are Megatron-LM's parameter counts, split by how a rank holds
// them: sharded by TP, replicated, sharded by expert TP x EP.
type mlmParams struct {
	tpBlock, repBlock, expBlock float64
	tpMTP, repMTP, expMTP       float64
	embedding                   float64 // one table: h x padded vocab
	total                       float64
}

func (in Inputs) mlmParams() mlmParams {
	h := float64(in.Hidden)
	gl := 1.0
	if in.SwiGLU {
		gl = 1.5
	}
	norm := 2.0
	if in.RMSNorm {
		norm = 1
	}
	attn := in.attention()
	denseMLP := float64(2*in.Hidden*in.FFN) * gl
	shared := float64(2*in.Hidden*in.SharedExpert) * gl
	routedHidden := in.Hidden
	if in.LatentSize > 0 {
		routedHidden = in.LatentSize
	}
	var routed, latentProj, router, sharedGate float64
	if in.NumExperts > 0 {
		routed = float64(2*routedHidden*in.MoEFFN*in.NumExperts) * gl
		router = float64(in.Hidden * in.NumExperts)
		if in.AddBias {
			router += float64(in.NumExperts)
		}
		if in.LatentSize > 0 {
			latentProj = float64(2 * in.Hidden * in.LatentSize)
		}
		if in.SharedExpert > 0 && in.SharedExpertGate {
			sharedGate = h
		}
	}
	ln := 2 * h * norm
	finalLN := norm * h

	pattern := in.moePattern()
	var dense, moe float64
	for _, m := range pattern {
		if m {
			moe++
		} else {
			dense++
		}
	}
	var mtpDense, mtpMoE float64
	if in.MTPLayers > 0 {
		if len(pattern) > 0 && pattern[len(pattern)-1] {
			mtpMoE = float64(in.MTPLayers)
		} else {
			mtpDense = float64(in.MTPLayers)
		}
	}
	p := mlmParams{embedding: h * float64(in.paddedVocab())}
	p.tpBlock = (attn+denseMLP)*dense + (attn+shared)*moe
	p.repBlock = ln*dense + (ln+latentProj+router+sharedGate)*moe + finalLN
	p.expBlock = routed * moe
	p.tpMTP = (attn+denseMLP)*mtpDense + (attn+shared)*mtpMoE
	p.repMTP = ln*mtpDense + (ln+latentProj+router+sharedGate)*mtpMoE
	p.expMTP = routed * mtpMoE
	embeddings := p.embedding
	if in.Untie {
		embeddings *= 2
	}
	p.total = p.tpBlock + p.repBlock + p.expBlock + p.tpMTP + p.repMTP + p.expMTP + embeddings
	return p
}

// MegatronLM is Megatron-LM's theoretical memory of the most loaded GPU
// (the first pipeline stage): compute_weight_and_optimizer_memory and the
// activation formula report_theoretical_memory picks.
func MegatronLM(in Inputs) (Estimate, error) {
	if err := in.check(); err != nil {
		return Estimate{}, err
	}
	p := in.mlmParams()
	t, pp := float64(in.TP), float64(in.PP)
	tpShard := (p.tpBlock/pp + p.tpMTP + p.embedding) / t
	if in.Untie && in.PP == 1 {
		tpShard += p.embedding / t // the output layer on the same GPU
	}
	repShard := p.repBlock/pp + p.repMTP
	expShard := (p.expBlock/pp + p.expMTP) / float64(in.ETP*in.EP)
	edp := float64(in.DP * in.TP * in.CP / (in.ETP * in.EP))
	denseBytes := bytesPerParameter(in.DistOptimizer, float64(in.DP))
	expertBytes := bytesPerParameter(in.DistOptimizer, edp)
	wo := (tpShard+repShard)*denseBytes + expShard*expertBytes

	e := Estimate{Estimator: EstimatorMegatronLM, TotalParameters: p.total,
		Components: []Component{{Name: "dense and embedding parameters and optimizer", Parameters: p.total - p.expBlock - p.expMTP,
			ParametersPerGPU: tpShard + repShard, BytesPerParameter: denseBytes, Bytes: (tpShard + repShard) * denseBytes}},
		Assumptions: []string{
			"Most loaded GPU: the first pipeline stage, with one embedding table; uneven pipeline stages and virtual stages do not change the weights counted.",
			"Adam with bf16 weights and fp32 gradients (6 B per parameter) plus fp32 master weights and moments (12 B), sharded over data parallel by the distributed optimizer (context parallel not counted in the shard).",
			"Not counted: allocator fragmentation and caching, CUDA/NCCL workspaces, CUDA graph buffers, MoE token imbalance and dispatcher buffers.",
		}}
	if p.expBlock+p.expMTP > 0 {
		e.Components = append(e.Components, Component{Name: "routed expert parameters and optimizer", Parameters: p.expBlock + p.expMTP,
			ParametersPerGPU: expShard, BytesPerParameter: expertBytes, Bytes: expShard * expertBytes})
	}
	e.WeightsAndOptimizerBytes = wo
	if in.SequenceParallel && in.Recompute == "selective" {
		e.ActivationBytes, e.ActivationFormula = in.mlmActivationSP(), "sequence parallel + selective recompute"
	} else {
		e.ActivationBytes, e.ActivationFormula = in.mlmActivationWithoutSP(), "without sequence parallel + selective recompute"
	}
	e.TotalBytes = e.WeightsAndOptimizerBytes + e.ActivationBytes
	return e, nil
}

// pipelineInFlight applies the schedule's factor: the interleaved
// schedule's penalty, or fewer micro-batches in flight than stages.
func (in Inputs) pipelineInFlight(a float64) float64 {
	p := float64(in.PP)
	switch {
	case in.VPP > 0:
		a *= 1 + (p-1)/(p*float64(in.VPP))
	case in.PP > 1 && in.MicroBatches > 0:
		a *= math.Min(1, float64(in.MicroBatches)/p)
	}
	return a
}

// mlmActivationSP is compute_activation_memory: Korthikanti et al.'s
// sequence parallel + selective recompute, for the first stage.
func (in Inputs) mlmActivationSP() float64 {
	s, b, h, p := float64(in.SeqLength), float64(in.MicroBatch), float64(in.Hidden), float64(in.PP)
	a := s * b * h * (18 + 4*(float64(in.FFN)/h))
	a *= float64(in.NumLayers)
	a += 8 * s * b * p
	a += s * b * h * p
	a = in.pipelineInFlight(a)
	if in.PP == 1 {
		a += s * b * h * 4 * (1 + float64(in.paddedVocab())/h)
	}
	return a / float64(in.TP)
}

// mlmActivationWithoutSP is compute_activation_memory_without_sp.
func (in Inputs) mlmActivationWithoutSP() float64 {
	s, b, h, p, t := float64(in.SeqLength), float64(in.MicroBatch), float64(in.Hidden), float64(in.PP), float64(in.TP)
	perLayer := s * b * h * (10 + 24/t)
	a := perLayer * float64(in.NumLayers)
	a += 8*s*b*p + s*b*h*p
	a = in.pipelineInFlight(a)
	if in.PP == 1 {
		logits := s * b * float64(in.paddedVocab()) / t
		a += (logits + s*b*h) * 2
	}
	return a * 1.05
}
