package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gorun-dev/gorun/internal/testkit/golden"
)

// TestPlanPresets plans every preset in configs/ and compares the text
// and JSON reports with testdata/plan/ (go test -update rewrites them).
func TestPlanPresets(t *testing.T) {
	presets, _ := filepath.Glob("../../configs/*.yaml")
	if len(presets) < 6 {
		t.Fatalf("presets: %v", presets)
	}
	for _, p := range presets {
		name := strings.TrimSuffix(filepath.Base(p), ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, format := range []string{"text", "json"} {
				r := runGorun(t, testEnv(), "plan", "--config", p, "--format", format, "--summary")
				if r.code != 0 {
					t.Fatalf("%s: exit %d\n%s%s", format, r.code, r.stdout, r.stderr)
				}
				golden.Check(t, filepath.Join("plan", name+"."+format), r.stdout)
			}
		})
	}
}

func TestPlanExitCodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unknown := write("unknown.yaml", "world_size: 8\ntensr_model_parallel_size: 2\n")
	broken := write("broken.yaml", "world_size: 8\n  tp: [\n")
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"valid", []string{"--config", "../../configs/llama3-8b.yaml"}, 0, "Layout: valid", ""},
		{"invalid still reports", []string{"--config", "../../configs/llama3-8b.yaml", "--tp", "3", "--format", "json"}, 1, `"valid": false`, ""},
		{"flags override the file", []string{"--config", "../../configs/llama3-70b.yaml", "--pp", "8", "--world-size", "64"}, 0, "pp 7: 10 layers", ""},
		{"unknown key", []string{"--config", unknown}, 2, "", `did you mean "tensor_model_parallel_size"?`},
		{"malformed yaml", []string{"--config", broken}, 2, "", "broken.yaml"},
		{"wrong type flag", []string{"--tp", "four", "--world-size", "8"}, 2, "", `--tensor-model-parallel-size: want an integer, got "four"`},
		{"bad format", []string{"--world-size", "8", "--format", "xml"}, 2, "", `--format="xml"`},
		{"bad estimator", []string{"--world-size", "8", "--estimator", "guess"}, 2, "", `want bridge or megatron-lm`},
		{"bad gpu", []string{"--world-size", "8", "--gpu", "tpu"}, 2, "", "h100-80gb"},
		{"bad gpu memory", []string{"--world-size", "8", "--gpu-memory", "80 parsecs"}, 2, "", "unit"},
		{"missing file", []string{"--config", filepath.Join(dir, "none.yaml")}, 2, "", "none.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runGorun(t, testEnv(), append([]string{"plan"}, tt.args...)...)
			if r.code != tt.code || !strings.Contains(r.stdout, tt.stdout) || !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("exit %d; want %d with %q / %q\nstdout:\n%s\nstderr:\n%s", r.code, tt.code, tt.stdout, tt.stderr, r.stdout, r.stderr)
			}
		})
	}
}

// TestPlanGroupsThroughTheCommandLine gives gorun plan each golden
// layout's inputs as its config file (JSON is YAML) and compares the
// groups of --format json with Megatron Core's.
func TestPlanGroupsThroughTheCommandLine(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../topology/testdata/rank_groups.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Layouts []struct {
			ID     string          `json:"id"`
			Inputs json.RawMessage `json:"inputs"`
			Groups map[string]struct {
				Ranks [][]int `json:"ranks"`
			} `json:"groups"`
		} `json:"layouts"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	for _, l := range g.Layouts {
		p := filepath.Join(t.TempDir(), l.ID+".json")
		if err := os.WriteFile(p, l.Inputs, 0o644); err != nil {
			t.Fatal(err)
		}
		r := runGorun(t, testEnv(), "plan", "--config", p, "--format", "json")
		var plan struct {
			Valid  bool               `json:"valid"`
			Groups map[string][][]int `json:"groups"`
			Ranks  []map[string]int   `json:"ranks"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil || !plan.Valid {
			t.Fatalf("%s: exit %d, %v\n%s%s", l.ID, r.code, err, r.stdout, r.stderr)
		}
		if len(plan.Groups) != 16 {
			t.Errorf("%s: %d group kinds; want 16", l.ID, len(plan.Groups))
		}
		for k, got := range plan.Groups {
			if !reflect.DeepEqual(got, l.Groups[k].Ranks) {
				t.Errorf("%s: %s groups %v; want %v", l.ID, k, got, l.Groups[k].Ranks)
			}
		}
		if len(plan.Ranks) == 0 || plan.Ranks[len(plan.Ranks)-1]["rank"] != len(plan.Ranks)-1 {
			t.Errorf("%s: per-rank list %v", l.ID, plan.Ranks)
		}
	}
}

// TestLaunchWithPlan: gorun --plan gives each worker the layout and its
// coordinates, and refuses a layout or world size that does not fit
// before any worker starts.
func TestLaunchWithPlan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.yaml")
	if err := os.WriteFile(plan, []byte("tensor_model_parallel_size: 2\npipeline_model_parallel_size: 2\nnum_layers: 8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, `touch "$1/started.$RANK"; echo "$RANK tp=$GORUN_TP_RANK pp=$GORUN_PP_RANK dp=$GORUN_DP_RANK of $GORUN_TP/$GORUN_PP/$GORUN_DP"`)
	r := runGorun(t, testEnv(), "--plan", plan, "--nproc-per-node=8", "--no-prefix", "--no-python", script, dir)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	// Megatron's default order tp-cp-ep-dp-pp: rank = tp + 2*(dp + 2*pp).
	for rank := range 8 {
		want := fmt.Sprintf("%d tp=%d pp=%d dp=%d of 2/2/2", rank, rank%2, rank/4, rank/2%2)
		if !strings.Contains(r.stdout, want) {
			t.Errorf("no %q in\n%s", want, r.stdout)
		}
	}
	for _, tt := range []struct {
		name, nproc, extra, stderr string
	}{
		{"layout does not fit", "6", "", "not valid for 6 workers"},
		{"world size differs", "8", "world_size: 16\n", "world_size 16, but this launch runs 8 workers"},
	} {
		if err := os.WriteFile(plan, []byte("tensor_model_parallel_size: 2\npipeline_model_parallel_size: 2\n"+tt.extra), 0o644); err != nil {
			t.Fatal(err)
		}
		refused := t.TempDir()
		r := runGorun(t, testEnv(), "--plan", plan, "--nproc-per-node="+tt.nproc, "--no-python", script, refused)
		left, _ := os.ReadDir(refused)
		if r.code != 2 || !strings.Contains(r.stderr, tt.stderr) || len(left) != 0 {
			t.Errorf("%s: exit %d, %d workers started; want 2 and none\n%s", tt.name, r.code, len(left), r.stderr)
		}
	}
}
