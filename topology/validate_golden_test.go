package topology

import (
	"encoding/json"
	"slices"
	"testing"
)

// goldenRules maps each case of golden/validation_cases.json to the rule
// that must fire ("" for an accepted configuration, "warning:<rule>" for
// a warning alone, "n/a" where the case does not concern a plan).
var goldenRules = map[string]struct {
	rule string
	// extra inputs that a plan always has but the upstream check did not
	// need.
	extra map[string]any
	why   string
}{
	"ps_world_not_divisible_by_model_size":    {rule: "world-divisible"},
	"ps_vpp_requires_pp_gt_1":                 {rule: "vpp-needs-pp"},
	"ps_non_pp_last_order_needs_equal_dp":     {rule: "order-expert-dp"},
	"ps_order_missing_cp":                     {rule: "order"},
	"ps_rankgenerator_ep_and_cp":              {rule: "n/a", why: "a direct RankGenerator call; initialize_model_parallel (and gorun) build separate dense and expert generators, so EP with CP is valid"},
	"ok_ps_w32_tp4_pp4_vpp5":                  {rule: ""},
	"bridge_world_not_divisible":              {rule: "world-divisible"},
	"args_num_layers_not_divisible_by_pp":     {rule: "layers-divisible-by-pp"},
	"ok_args_layers_per_vp_stage_4":           {rule: ""},
	"args_vpp_two_knobs":                      {rule: "vpp-knobs"},
	"args_vpp_pp1":                            {rule: "vpp-needs-pp"},
	"args_vpp_pp2_no_overlap":                 {rule: "vpp-no-overlap-pp"},
	"bridge_cp_seq_len":                       {rule: "seq-divisible-by-2cp"},
	"args_sp_with_tp1_is_disabled":            {rule: "warning:sp-without-tp"},
	"args_experts_not_divisible_by_ep":        {rule: "experts-divisible-by-ep"},
	"args_hidden_not_divisible_by_heads":      {rule: "hidden-divisible-by-heads"},
	"mcore_pp_without_pipeline_dtype":         {rule: "n/a", why: "dtype plumbing: Megatron-LM and Bridge set pipeline_dtype from the parameters' dtype"},
	"mcore_ep_tp_without_sp_warns":            {rule: "warning:ep-tp-without-sp", extra: map[string]any{"num_experts": 8}},
	"mcore_query_groups_vs_tp":                {rule: "query-groups-vs-tp"},
	"ok_mcore_query_groups_divisor_of_tp":     {rule: ""},
	"mcore_ep_without_experts":                {rule: "ep-needs-experts"},
	"mcore_num_moe_experts_nonpositive":       {rule: "experts-positive"},
	"mcore_cpu_offload_with_pp":               {rule: "cpu-offload-with-pp"},
	"mcore_cpu_offload_with_recompute":        {rule: "cpu-offload-with-recompute"},
	"mcore_recompute_full_without_method":     {rule: "recompute-full-method"},
	"mcore_recompute_full_without_num_layers": {rule: "recompute-full-layers"},
	"mcore_uneven_with_account_for":           {rule: "uneven-with-account-for"},
	"mcore_uneven_first_nonpositive":          {rule: "uneven-stage-positive"},
	"mcore_uneven_last_vs_vpp":                {rule: "uneven-last-vs-vpp"},
	"mcore_uneven_mismatch":                   {rule: "uneven-middle-mismatch"},
	"mcore_uneven_middle_vs_vpp":              {rule: "layers-per-middle-rank-divisible-by-vpp"},
	"ok_mcore_uneven_15_15_vpp5":              {rule: ""},
	"mcore_account_for_vpp":                   {rule: "layers-per-rank-divisible-by-vpp"},
	"build_num_layers_not_divisible_by_pp":    {rule: "layers-divisible-by-pp"},
	"ok_build_llama3_70b_pp4_vpp5":            {rule: ""},
	"gbs_not_divisible_by_mbs_dp":             {rule: "global-batch-divisible"},
	"runtime_sp_seq_not_divisible_by_tp":      {rule: "seq-divisible-by-tp"},
}

// goldenConfig builds a plan's configuration from a case: the defaults
// golden/README.md gives for the layer the case applies to, then its
// inputs.
func goldenConfig(t *testing.T, appliesTo string, inputs, extra map[string]any) *Config {
	t.Helper()
	c := &Config{}
	set := func(k string, v any) {
		if f, ok := v.(float64); ok {
			v = int(f)
		}
		if err := c.Set(k, v); err != nil {
			t.Fatalf("input %s: %v", k, err)
		}
	}
	// The TransformerConfig defaults of the harness.
	for k, v := range map[string]any{"num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64, "num_query_groups": 8,
		"ffn_hidden_size": 28672, "kv_channels": 128} {
		set(k, v)
	}
	if appliesTo == "megatron-lm.validate_args" {
		for k, v := range map[string]any{"world_size": 32, "tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 4, "seq_length": 4096} {
			set(k, v)
		}
	}
	for k, v := range inputs {
		set(k, v)
	}
	for k, v := range extra {
		set(k, v)
	}
	if c.WorldSize == nil {
		s := c.Resolve()
		dense, expert := s.TP*s.PP*s.CP, s.ETP*s.EP*s.PP
		world := dense * expert / gcd(dense, expert)
		if c.DP != nil {
			world = *c.DP * dense
		}
		set("world_size", world)
	}
	return c
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func TestValidationMatchesMegatronRules(t *testing.T) {
	var g struct {
		Cases []struct {
			ID        string         `json:"id"`
			AppliesTo []string       `json:"applies_to"`
			Inputs    map[string]any `json:"inputs"`
			Expected  struct {
				Raises   *string  `json:"raises"`
				Warnings []string `json:"warnings"`
				Result   []string `json:"result"`
			} `json:"expected"`
		} `json:"cases"`
	}
	readGolden(t, "validation_cases.json", &g)
	for _, c := range g.Cases {
		t.Run(c.ID, func(t *testing.T) {
			want, ok := goldenRules[c.ID]
			if !ok {
				t.Fatalf("case %s has no expected rule in goldenRules", c.ID)
			}
			if want.rule == "n/a" {
				t.Skipf("not a plan's rule: %s", want.why)
			}
			cfg := goldenConfig(t, c.AppliesTo[0], c.Inputs, want.extra)
			issues := Validate(cfg)
			var errs, warns []string
			for _, i := range issues {
				if i.Severity == Error {
					errs = append(errs, i.Rule)
				} else {
					warns = append(warns, i.Rule)
				}
			}
			dump, _ := json.Marshal(issues)
			switch {
			case c.Expected.Raises != nil:
				if !slices.Contains(errs, want.rule) {
					t.Errorf("upstream raises %s; want rule %s among the errors, got %s", *c.Expected.Raises, want.rule, dump)
				}
			case len(errs) > 0:
				t.Errorf("upstream accepts this; got errors %s", dump)
			case len(want.rule) > 8 && want.rule[:8] == "warning:":
				if !slices.Contains(warns, want.rule[8:]) {
					t.Errorf("want warning %s, got %s", want.rule[8:], dump)
				}
			}
			s := cfg.Resolve()
			for _, r := range c.Expected.Result {
				switch r {
				case "data_parallel_size=2":
					if s.DP() != 2 {
						t.Errorf("dp %d; want 2", s.DP())
					}
				case "virtual_pipeline_model_parallel_size=5":
					if s.VPP != 5 {
						t.Errorf("vpp %d; want 5", s.VPP)
					}
				case "num_layers_to_build=4":
					stages, err := s.Pipeline().Stages()
					if err != nil || stages[0].Chunks[0].NumLayers != 4 {
						t.Errorf("first chunk: %v, %v; want 4 layers", stages, err)
					}
				default:
					t.Errorf("unchecked result %q", r)
				}
			}
		})
	}
}
