package topology

// Spec is a Config with Megatron's defaults applied: the values a plan
// works with. Unset optional knobs are 0 (sizes), "" (strings) or false.
type Spec struct {
	World, TP, PP, VPP, CP, EP, ETP int
	Order                           string
	PerNode, NVLinkDomain           int

	NumLayers, Hidden, FFN, Heads, QueryGroups, KVChannels int
	VocabSize, VocabDivisibleBy                            int
	Untie, SwiGLU, AddBias, RMSNorm                        bool
	NumExperts, MoEFFN, TopK, MoELayerFreq, SharedExpert   int
	SharedExpertGate                                       bool
	LatentSize, MTPLayers                                  int

	FirstStageLayers, LastStageLayers   int
	AccountForEmbedding, AccountForLoss bool

	SeqLength, MicroBatch, GlobalBatch int
	DistOptimizer, SequenceParallel    bool
	// Recompute is "", "selective" or "full".
	Recompute string
}

// DP is the dense data-parallel size.
func (s Spec) DP() int { return s.World / max(1, s.TP*s.PP*s.CP) }

// EDP is the expert data-parallel size.
func (s Spec) EDP() int { return s.World / max(1, s.ETP*s.EP*s.PP) }

// Layout is the spec's parallel layout.
func (s Spec) Layout() Layout {
	return Layout{World: s.World, TP: s.TP, PP: s.PP, VPP: s.VPP, CP: s.CP, EP: s.EP, ETP: s.ETP, Order: s.Order}
}

// Pipeline is the spec's layer split.
func (s Spec) Pipeline() Pipeline {
	return Pipeline{NumLayers: s.NumLayers, PP: s.PP, VPP: s.VPP, FirstStageLayers: s.FirstStageLayers,
		LastStageLayers: s.LastStageLayers, AccountForEmbedding: s.AccountForEmbedding, AccountForLoss: s.AccountForLoss}
}

// MicroBatches is global batch / (micro batch x dp), or 0 if unknown.
func (s Spec) MicroBatches() int {
	d := s.MicroBatch * s.DP()
	if d == 0 {
		return 0
	}
	return s.GlobalBatch / d
}

// DefaultNprocPerNode is the ranks per node assumed without one given.
const DefaultNprocPerNode = 8

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

func strOr(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

// Resolve applies Megatron-LM's defaults. It does not validate: Validate
// reports what is wrong with the result.
func (c *Config) Resolve() Spec {
	s := Spec{
		TP: intOr(c.TP, 1), PP: intOr(c.PP, 1), VPP: intOr(c.VPP, 0), CP: intOr(c.CP, 1), EP: intOr(c.EP, 1),
		PerNode:   intOr(c.NprocPerNode, DefaultNprocPerNode),
		NumLayers: intOr(c.NumLayers, 0), Hidden: intOr(c.HiddenSize, 0), Heads: intOr(c.Heads, 0),
		VocabSize: intOr(c.VocabSize, 0), VocabDivisibleBy: intOr(c.VocabDivisibleBy, 128),
		Untie: boolOr(c.Untie, false), SwiGLU: boolOr(c.SwiGLU, false), AddBias: boolOr(c.AddBiasLinear, true),
		RMSNorm:    strOr(c.Normalization, "LayerNorm") == "RMSNorm",
		NumExperts: intOr(c.NumExperts, 0), TopK: intOr(c.MoERouterTopK, 2), MoELayerFreq: intOr(c.MoELayerFreq, 1),
		SharedExpert: intOr(c.MoESharedExpertSize, 0), SharedExpertGate: boolOr(c.MoESharedExpertGate, false),
		LatentSize: intOr(c.MoELatentSize, 0), MTPLayers: intOr(c.MTPLayers, 0),
		FirstStageLayers: intOr(c.FirstStageLayers, 0), LastStageLayers: intOr(c.LastStageLayers, 0),
		AccountForEmbedding: boolOr(c.AccountForEmbedding, false), AccountForLoss: boolOr(c.AccountForLoss, false),
		SeqLength: intOr(c.SeqLength, 0), MicroBatch: intOr(c.MicroBatchSize, 1),
		DistOptimizer: boolOr(c.DistOptimizer, false), Recompute: strOr(c.Recompute, ""),
	}
	s.World = intOr(c.WorldSize, 0)
	if s.World == 0 && c.NNodes != nil {
		s.World = *c.NNodes * s.PerNode
	}
	s.ETP = intOr(c.ETP, s.TP)
	s.NVLinkDomain = intOr(c.NVLinkDomain, s.PerNode)
	s.Order = strOr(c.Order, DefaultOrder)
	if c.Order == nil && boolOr(c.TPPPDPMapping, false) {
		s.Order = OrderTPPPDP
	}
	if c.VPP == nil && c.LayersPerVirtual != nil && s.PP > 0 && *c.LayersPerVirtual > 0 && s.NumLayers%s.PP == 0 {
		// Megatron-LM: the virtual stages follow from layers per stage.
		if v := s.NumLayers / s.PP / *c.LayersPerVirtual; v > 1 {
			s.VPP = v
		}
	}
	if s.VPP == 1 {
		s.VPP = 0 // one virtual stage is no interleaving
	}
	s.FFN = intOr(c.FFNHiddenSize, 4*s.Hidden)
	s.QueryGroups = s.Heads
	if c.QueryGroups != nil && boolOr(c.GQA, true) {
		s.QueryGroups = *c.QueryGroups
	}
	if s.Heads > 0 {
		s.KVChannels = intOr(c.KVChannels, s.Hidden/s.Heads)
	}
	s.MoEFFN = intOr(c.MoEFFNHiddenSize, s.FFN)
	// Megatron-LM turns sequence parallelism off when tp is 1.
	s.SequenceParallel = boolOr(c.SequenceParallel, false) && s.TP > 1
	s.GlobalBatch = intOr(c.GlobalBatchSize, s.MicroBatch*s.DP())
	return s
}
