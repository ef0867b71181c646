package topology

import (
	"fmt"

	"github.com/gorun-dev/gorun/memory"
)

// Options choose what a plan computes.
type Options struct {
	// Estimator is memory.EstimatorBridge (default) or
	// memory.EstimatorMegatronLM.
	Estimator string
	// PerRank adds the groups and each rank's coordinates.
	PerRank bool
}

// Plan is the outcome of planning one configuration.
type Plan struct {
	Valid     bool     `json:"valid"`
	Errors    []Issue  `json:"errors"`
	Warnings  []Issue  `json:"warnings"`
	WorldSize int      `json:"world_size"`
	Parallel  Parallel `json:"parallel"`
	// Groups and Ranks are present with Options.PerRank.
	Groups          map[string][][]int `json:"groups,omitempty"`
	Ranks           []Coordinates      `json:"ranks,omitempty"`
	Stages          []Stage            `json:"stages"`
	Memory          *MemoryReport      `json:"memory,omitempty"`
	Recommendations []Recommendation   `json:"recommendations"`
	Inputs          map[string]any     `json:"inputs"`
	spec            Spec
}

// Parallel is the resolved layout.
type Parallel struct {
	TP           int    `json:"tp"`
	PP           int    `json:"pp"`
	VPP          int    `json:"vpp"`
	CP           int    `json:"cp"`
	EP           int    `json:"ep"`
	ETP          int    `json:"etp"`
	DP           int    `json:"dp"`
	ExpertDP     int    `json:"expt_dp"`
	Order        string `json:"order"`
	Nodes        int    `json:"nodes"`
	NprocPerNode int    `json:"nproc_per_node"`
	MicroBatches int    `json:"num_microbatches"`
}

// MemoryReport is the estimate of the most loaded GPU against the device.
type MemoryReport struct {
	memory.Estimate
	// CapacityBytes is the device's memory, 0 when unknown.
	CapacityBytes float64 `json:"capacity_bytes"`
	// Fits is null when the capacity is unknown.
	Fits *bool `json:"fits"`
	// HeadroomBytes is capacity minus total (negative: over).
	HeadroomBytes float64  `json:"headroom_bytes,omitempty"`
	NotCounted    []string `json:"not_counted"`
}

// Spec is the resolved configuration of the plan.
func (p *Plan) Spec() Spec { return p.spec }

// MakePlan validates c and, when valid, lays out its ranks and stages and
// estimates its memory against capacity (bytes; 0 for unknown).
func MakePlan(c *Config, capacity float64, opt Options) (*Plan, error) {
	s := c.Resolve()
	p := &Plan{WorldSize: s.World, Inputs: c.Values(), spec: s, Errors: []Issue{}, Warnings: []Issue{}, Recommendations: []Recommendation{}}
	for _, i := range Validate(c) {
		if i.Severity == Error {
			p.Errors = append(p.Errors, i)
		} else {
			p.Warnings = append(p.Warnings, i)
		}
	}
	p.Valid = len(p.Errors) == 0
	p.Parallel = Parallel{TP: s.TP, PP: s.PP, VPP: s.VPP, CP: s.CP, EP: s.EP, ETP: s.ETP, Order: s.Order, NprocPerNode: s.PerNode}
	if !p.Valid {
		return p, nil
	}
	p.Parallel.DP, p.Parallel.ExpertDP, p.Parallel.MicroBatches = s.DP(), s.EDP(), s.MicroBatches()
	p.Parallel.Nodes = (s.World + s.PerNode - 1) / s.PerNode
	p.Stages = []Stage{}
	if s.NumLayers > 0 {
		stages, err := s.Pipeline().Stages()
		if err != nil {
			return nil, fmt.Errorf("plan: %w", err) // Validate let through a split Stages refuses: a bug
		}
		p.Stages = stages
	}
	if opt.PerRank {
		r, err := NewRanks(s.Layout())
		if err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
		p.Groups = map[string][][]int{}
		for _, k := range GroupKinds() {
			p.Groups[k] = r.Groups(k)
		}
		p.Ranks = make([]Coordinates, s.World)
		for i := range p.Ranks {
			p.Ranks[i] = r.Coordinates(i, s.PerNode)
		}
	}
	if s.NumLayers > 0 && s.Hidden > 0 && s.Heads > 0 && s.SeqLength > 0 && (s.VocabSize > 0 || c.PaddedVocabSize != nil) {
		est, err := estimate(c, s, opt.Estimator)
		if err != nil {
			return nil, err
		}
		p.Memory = report(est, capacity)
		p.Recommendations = advise(c, s, opt.Estimator, capacity, est)
	} else {
		p.Warnings = append(p.Warnings, Issue{Rule: "memory-inputs", Severity: Warning,
			Message: "no memory estimate: give num_layers, hidden_size, num_attention_heads, seq_length and vocab_size"})
	}
	return p, nil
}

// report compares an estimate with the capacity.
func report(est memory.Estimate, capacity float64) *MemoryReport {
	m := &MemoryReport{Estimate: est, CapacityBytes: capacity, NotCounted: memory.NotCounted()}
	if capacity > 0 {
		fits := est.TotalBytes <= capacity
		m.Fits, m.HeadroomBytes = &fits, capacity-est.TotalBytes
	}
	return m
}

// MemoryInputs maps a resolved configuration to the estimators' inputs.
func MemoryInputs(c *Config, s Spec) memory.Inputs {
	return memory.Inputs{NumLayers: s.NumLayers, Hidden: s.Hidden, FFN: s.FFN, Heads: s.Heads, QueryGroups: s.QueryGroups, KVChannels: s.KVChannels,
		Vocab: s.VocabSize, PaddedVocab: intOr(c.PaddedVocabSize, 0), VocabDivisibleBy: s.VocabDivisibleBy, ShouldPadVocab: boolOr(c.ShouldPadVocab, false),
		Untie: s.Untie, SwiGLU: s.SwiGLU, AddBias: s.AddBias, RMSNorm: s.RMSNorm,
		NumExperts: s.NumExperts, MoEFFN: s.MoEFFN, TopK: s.TopK, MoELayerFreq: s.MoELayerFreq, SharedExpert: s.SharedExpert,
		SharedExpertGate: s.SharedExpertGate, LatentSize: s.LatentSize, MTPLayers: s.MTPLayers,
		TP: s.TP, PP: s.PP, VPP: s.VPP, CP: s.CP, EP: s.EP, ETP: s.ETP, DP: s.DP(), FirstStageLayers: s.FirstStageLayers, LastStageLayers: s.LastStageLayers,
		SeqLength: s.SeqLength, MicroBatch: s.MicroBatch, MicroBatches: s.MicroBatches(), DistOptimizer: s.DistOptimizer,
		SequenceParallel: s.SequenceParallel, Recompute: s.Recompute}
}

func estimate(c *Config, s Spec, estimator string) (memory.Estimate, error) {
	in := MemoryInputs(c, s)
	if in.Vocab == 0 {
		in.Vocab = in.PaddedVocab
	}
	switch estimator {
	case "", memory.EstimatorBridge:
		return memory.Bridge(in)
	case memory.EstimatorMegatronLM:
		return memory.MegatronLM(in)
	}
	return memory.Estimate{}, fmt.Errorf("estimator %q: want %s or %s", estimator, memory.EstimatorBridge, memory.EstimatorMegatronLM)
}
