package topology

import (
	"fmt"
	"slices"
	"strings"
)

// Severity tells errors (the job would fail) from warnings.
type Severity string

// Severities.
const (
	Error   Severity = "error"
	Warning Severity = "warning"
)

// Issue is one broken rule: which, how bad, in words, and the inputs
// involved with their values.
type Issue struct {
	Rule     string         `json:"rule"`
	Severity Severity       `json:"severity"`
	Message  string         `json:"message"`
	Inputs   map[string]any `json:"inputs,omitempty"`
}

func (i Issue) String() string { return string(i.Severity) + ": " + i.Message }

// MaxWorldSize is the largest world a plan takes (2^21 ranks).
const MaxWorldSize = 1 << 21

// checker collects every issue of one configuration.
type checker struct {
	c      *Config
	s      Spec
	issues []Issue
}

func (k *checker) add(sev Severity, rule, msg string, kv ...any) {
	in := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		in[kv[i].(string)] = kv[i+1]
	}
	k.issues = append(k.issues, Issue{Rule: rule, Severity: sev, Message: msg, Inputs: in})
}

func (k *checker) fail(rule, msg string, kv ...any) { k.add(Error, rule, msg, kv...) }
func (k *checker) warn(rule, msg string, kv ...any) { k.add(Warning, rule, msg, kv...) }

// Validate checks a configuration against every rule Megatron-LM, Megatron
// Core and Megatron-Bridge apply to a layout, a model's shape and a batch,
// and returns all the issues at once (errors first).
func Validate(c *Config) []Issue {
	k := &checker{c: c, s: c.Resolve()}
	k.positive()
	if !k.has(Error) {
		k.world()
		k.pipeline()
		k.model()
		k.experts()
		k.batch()
		k.recompute()
		k.placement()
	}
	slices.SortStableFunc(k.issues, func(a, b Issue) int {
		if a.Severity == b.Severity {
			return 0
		}
		if a.Severity == Error {
			return -1
		}
		return 1
	})
	return k.issues
}

func (k *checker) has(sev Severity) bool {
	return slices.ContainsFunc(k.issues, func(i Issue) bool { return i.Severity == sev })
}

// positive: sizes are at least 1 (0 where "none" is meaningful), and the
// world size is known.
func (k *checker) positive() {
	c := k.c
	for _, f := range Fields() {
		v, ok := c.Get(f.Key).(int)
		if !ok || v >= 1 {
			continue
		}
		switch f.Key {
		case "rank_offset", "cpu_offloading_num_layers", "mtp_num_layers", "moe_shared_expert_intermediate_size":
			if v >= 0 {
				continue
			}
		case "num_experts":
			continue // its own rule
		case "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage":
			k.fail("uneven-stage-positive", fmt.Sprintf("%s is %d: a stage of an uneven pipeline needs at least one layer", f.Key, v), f.Key, v)
			continue
		}
		k.fail("positive", fmt.Sprintf("%s is %d: want at least 1", f.Key, v), f.Key, v)
	}
	if k.s.World == 0 {
		k.fail("world-size-unknown", "world size unknown: give world_size, or nnodes and nproc_per_node")
	}
	if k.s.World > MaxWorldSize {
		k.fail("world-size-limit", fmt.Sprintf("world size %d: gorun plans at most %d ranks", k.s.World, MaxWorldSize), "world_size", k.s.World)
	}
	// No dimension can exceed the world (this also keeps their products
	// from overflowing).
	for _, d := range []struct {
		key  string
		size int
	}{{"tensor_model_parallel_size", k.s.TP}, {"pipeline_model_parallel_size", k.s.PP}, {"context_parallel_size", k.s.CP},
		{"expert_model_parallel_size", k.s.EP}, {"expert_tensor_parallel_size", k.s.ETP}} {
		if k.s.World > 0 && d.size > k.s.World {
			k.fail("size-above-world", fmt.Sprintf("%s %d is larger than the world size %d", d.key, d.size, k.s.World), d.key, d.size, "world_size", k.s.World)
		}
	}
	if k.s.VPP > 0 && k.s.NumLayers > 0 && k.s.VPP > k.s.NumLayers {
		k.fail("vpp-above-layers", fmt.Sprintf("virtual_pipeline_model_parallel_size %d exceeds num_layers %d", k.s.VPP, k.s.NumLayers), "virtual_pipeline_model_parallel_size", k.s.VPP)
	}
	if c.WorldSize != nil && c.NNodes != nil && *c.WorldSize != *c.NNodes*k.s.PerNode {
		k.fail("world-size-mismatch", fmt.Sprintf("world_size %d differs from nnodes %d x nproc_per_node %d = %d", *c.WorldSize, *c.NNodes, k.s.PerNode, *c.NNodes*k.s.PerNode),
			"world_size", *c.WorldSize, "nnodes", *c.NNodes, "nproc_per_node", k.s.PerNode)
	}
	if k.s.NumLayers == 0 {
		k.warn("num-layers-unknown", "num_layers is not set: no layer placement and no checks of the pipeline split")
	}
}

// world: the layout divides the world and can be generated.
func (k *checker) world() {
	c, s := k.c, k.s
	model := s.TP * s.PP * s.CP
	if s.World%model != 0 {
		k.fail("world-divisible", fmt.Sprintf("world size %d is not a multiple of tp x pp x cp = %d x %d x %d = %d", s.World, s.TP, s.PP, s.CP, model),
			"world_size", s.World, "tensor_model_parallel_size", s.TP, "pipeline_model_parallel_size", s.PP, "context_parallel_size", s.CP)
		return
	}
	if s.World%(s.ETP*s.EP*s.PP) != 0 {
		k.fail("expert-world-divisible", fmt.Sprintf("world size %d is not a multiple of etp x ep x pp = %d x %d x %d = %d", s.World, s.ETP, s.EP, s.PP, s.ETP*s.EP*s.PP),
			"world_size", s.World, "expert_tensor_parallel_size", s.ETP, "expert_model_parallel_size", s.EP, "pipeline_model_parallel_size", s.PP)
		return
	}
	if c.DP != nil && *c.DP != s.DP() {
		k.fail("dp-mismatch", fmt.Sprintf("data_parallel_size %d, but world %d / (tp x pp x cp = %d) gives %d", *c.DP, s.World, model, s.DP()),
			"data_parallel_size", *c.DP, "world_size", s.World)
	}
	if c.ExpertDP != nil && *c.ExpertDP != s.EDP() {
		k.fail("dp-mismatch", fmt.Sprintf("expert_data_parallel_size %d, but world %d / (etp x ep x pp = %d) gives %d", *c.ExpertDP, s.World, s.ETP*s.EP*s.PP, s.EDP()),
			"expert_data_parallel_size", *c.ExpertDP, "world_size", s.World)
	}
	if _, err := NewRanks(s.Layout()); err != nil {
		k.fail("order", fmt.Sprintf("rank order: %v", err), "order", s.Order)
		return
	}
	if !strings.HasSuffix(s.Order, "pp") && s.PP > 1 && s.EDP() != s.DP() {
		k.fail("order-expert-dp", fmt.Sprintf("with the order %s (pipeline not slowest) the expert data-parallel size (%d) must equal the dense one (%d)", s.Order, s.EDP(), s.DP()),
			"order", s.Order, "data_parallel_size", s.DP(), "expert_data_parallel_size", s.EDP())
	}
	for _, kv := range []struct {
		key  string
		want int
	}{{"rank_offset", 0}, {"gtp_remat_size", 1}, {"expert_gtp_remat_size", 1}} {
		if v, ok := c.Get(kv.key).(int); ok && v != kv.want {
			k.fail("unsupported", fmt.Sprintf("%s %d: gorun plans only %d", kv.key, v, kv.want), kv.key, v)
		}
	}
	if n := intOr(c.DistOptInstances, 1); n > 1 {
		if (s.DP()*s.CP)%n != 0 {
			k.fail("distopt-instances", fmt.Sprintf("dp x cp = %d is not a multiple of num_distributed_optimizer_instances %d", s.DP()*s.CP, n), "num_distributed_optimizer_instances", n)
		}
		if s.EDP()%n != 0 {
			k.fail("distopt-instances-expert", fmt.Sprintf("expert dp %d is not a multiple of num_distributed_optimizer_instances %d", s.EDP(), n), "num_distributed_optimizer_instances", n)
		}
	}
}
