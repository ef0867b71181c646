package memory

import (
	"fmt"
	"slices"
)

// bridgeParams are Megatron-Bridge's parameter counts per layer.
type bridgeParams struct {
	denseByLayer, routedByLayer []float64 // transformer layers, then MTP layers
	finalLN, embeddings, vocab  float64
	denseTotal, routedTotal     float64
}

func (in Inputs) bridgeParams() bridgeParams {
	h := float64(in.Hidden)
	ffnFactor := 2.0
	if in.SwiGLU {
		ffnFactor = 3
	}
	attn := in.attention()
	lnLayer := 4 * h
	denseMLP := ffnFactor * h * float64(in.FFN)
	shared := ffnFactor * h * float64(in.SharedExpert)
	var routed, latentProj float64
	if in.NumExperts > 0 {
		if in.LatentSize > 0 {
			routed = ffnFactor * float64(in.LatentSize) * float64(in.MoEFFN) * float64(in.NumExperts)
			latentProj = 2 * h * float64(in.LatentSize)
		} else {
			routed = ffnFactor * h * float64(in.MoEFFN) * float64(in.NumExperts)
		}
	}
	pattern := in.moePattern()
	for range in.MTPLayers {
		pattern = append(pattern, len(pattern) > 0 && pattern[len(pattern)-1])
	}
	vocab := in.Vocab
	if in.ShouldPadVocab {
		vocab = in.paddedVocab()
	}
	p := bridgeParams{finalLN: 2 * h, vocab: float64(vocab)}
	for _, moe := range pattern {
		d, r := attn+lnLayer+denseMLP, 0.0
		if moe {
			d, r = attn+lnLayer+shared+latentProj, routed
		}
		p.denseByLayer = append(p.denseByLayer, d)
		p.routedByLayer = append(p.routedByLayer, r)
		p.denseTotal += d
		p.routedTotal += r
	}
	p.denseTotal += p.finalLN
	p.embeddings = h * p.vocab
	if in.Untie {
		p.embeddings += h * p.vocab
	}
	return p
}

// Bridge is Megatron-Bridge's estimate_training_memory: the most loaded
// GPU shard, with dense (and embedding) and routed-expert components and
// the sequence parallel + selective recompute activations.
func Bridge(in Inputs) (Estimate, error) {
	if err := in.check(); err != nil {
		return Estimate{}, err
	}
	p := in.bridgeParams()
	h, t := float64(in.Hidden), float64(in.TP)
	var denseGPU, routedGPU float64
	if in.FirstStageLayers > 0 || in.LastStageLayers > 0 {
		stages, err := in.unevenStages()
		if err != nil {
			return Estimate{}, err
		}
		var maxDense, maxRouted float64
		mtp := in.NumLayers // MTP layers follow the transformer layers, on the last stage
		for j, idx := range stages {
			var d, r float64
			for _, i := range idx {
				d += p.denseByLayer[i]
				r += p.routedByLayer[i]
			}
			if j == len(stages)-1 {
				for i := mtp; i < len(p.denseByLayer); i++ {
					d += p.denseByLayer[i]
					r += p.routedByLayer[i]
				}
				d += p.finalLN
				d += h * p.vocab
			}
			if j == 0 {
				d += h * p.vocab
			}
			maxDense, maxRouted = max(maxDense, d), max(maxRouted, r)
		}
		denseGPU = maxDense / t
		routedGPU = maxRouted / float64(in.EP*in.ETP)
	} else {
		denseGPU = p.denseTotal/float64(in.PP*in.TP) + h*p.vocab/t
		if in.Untie && in.PP == 1 {
			denseGPU += h * p.vocab / t
		}
		routedGPU = p.routedTotal / float64(in.PP*in.EP*in.ETP)
	}
	denseBytes := bytesPerParameter(in.DistOptimizer, float64(max(1, in.DP*in.CP)))
	expertBytes := bytesPerParameter(in.DistOptimizer, float64(max(1, in.DP*in.TP*in.CP/(in.EP*in.ETP))))
	e := Estimate{Estimator: EstimatorBridge, TotalParameters: p.denseTotal + p.routedTotal + p.embeddings,
		ActivationFormula: "sequence parallel + selective recompute",
		Components: []Component{{Name: "dense parameters and optimizer", Parameters: p.denseTotal + p.embeddings,
			ParametersPerGPU: denseGPU, BytesPerParameter: denseBytes, Bytes: denseGPU * denseBytes}},
		Assumptions: []string{
			"Most loaded GPU shard; the runtime allocator, kernel workspaces and CUDA graph buffers are not counted.",
			"Adam: 18 B per parameter without the distributed optimizer, else 6 B plus 12 B sharded over the optimizer's data-parallel group (dp x cp for dense parameters).",
			"Embeddings sit on the first and last pipeline stages; an untied output layer counts twice only when PP is 1.",
			"Activations assume sequence parallelism and selective recompute; full recompute, CPU offload, token imbalance and dispatcher workspaces are not modelled.",
		}}
	if p.routedTotal > 0 {
		e.Components = append(e.Components, Component{Name: "routed expert parameters and optimizer", Parameters: p.routedTotal,
			ParametersPerGPU: routedGPU, BytesPerParameter: expertBytes, Bytes: routedGPU * expertBytes})
	}
	for _, c := range e.Components {
		e.WeightsAndOptimizerBytes += c.Bytes
	}
	e.ActivationBytes = in.bridgeActivation(p)
	e.TotalBytes = e.WeightsAndOptimizerBytes + e.ActivationBytes
	return e, nil
}

// FFNActivationRatio is Bridge's MLP width relative to the hidden size,
// averaged over the layers (MoE layers count their active experts).
func (in Inputs) ffnActivationRatio() float64 {
	pattern := in.moePattern()
	for range in.MTPLayers {
		pattern = append(pattern, len(pattern) > 0 && pattern[len(pattern)-1])
	}
	var dense, moe float64
	for _, m := range pattern {
		if m {
			moe++
		} else {
			dense++
		}
	}
	num := dense*float64(in.FFN) + moe*float64(in.MoEFFN*in.TopK+in.SharedExpert)
	return num / (float64(len(pattern)) * float64(in.Hidden))
}

// bridgeActivation is Bridge's _compute_activation_memory_bytes.
func (in Inputs) bridgeActivation(p bridgeParams) float64 {
	s, b, h, pp := float64(in.SeqLength), float64(in.MicroBatch), float64(in.Hidden), float64(in.PP)
	layers := float64(in.NumLayers + in.MTPLayers)
	a := s * b * h * (18 + 4*in.ffnActivationRatio()) * layers
	a += 8*s*b*pp + s*b*h*pp
	a = in.pipelineInFlight(a)
	if in.PP == 1 {
		a += s * b * h * 4 * (1 + p.vocab/h)
	}
	return a / float64(in.TP*in.CP)
}

// unevenStages lists the layer indices of each pipeline stage when the
// first and/or last stage sizes are fixed: contiguous without virtual
// stages, else dealt round-robin in chunks of count/VPP per stage.
func (in Inputs) unevenStages() ([][]int, error) {
	if in.PP < 2 {
		return nil, fmt.Errorf("memory estimate: an uneven pipeline needs pipeline_model_parallel_size above 1")
	}
	counts := make([]int, in.PP)
	rest, restStages := in.NumLayers, in.PP
	if in.FirstStageLayers > 0 {
		counts[0], rest, restStages = in.FirstStageLayers, rest-in.FirstStageLayers, restStages-1
	}
	if in.LastStageLayers > 0 {
		counts[in.PP-1], rest, restStages = in.LastStageLayers, rest-in.LastStageLayers, restStages-1
	}
	if restStages > 0 {
		if rest < 0 || rest%restStages != 0 {
			return nil, fmt.Errorf("memory estimate: %d layers do not divide evenly over the %d remaining pipeline stages", rest, restStages)
		}
		for j := range counts {
			if counts[j] == 0 {
				counts[j] = rest / restStages
			}
		}
	}
	v := max(in.VPP, 1)
	stages := make([][]int, in.PP)
	next := 0
	for range v {
		for j, n := range counts {
			if n%v != 0 {
				return nil, fmt.Errorf("memory estimate: stage %d's %d layers do not divide into %d virtual stages", j, n, v)
			}
			for range n / v {
				stages[j] = append(stages[j], next)
				next++
			}
		}
	}
	if next != in.NumLayers {
		return nil, fmt.Errorf("memory estimate: the stages hold %d layers, not num_layers %d", next, in.NumLayers)
	}
	for _, s := range stages {
		slices.Sort(s)
	}
	return stages, nil
}
