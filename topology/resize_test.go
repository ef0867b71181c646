package topology

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestFitSizes: TP, PP stay; DP and the micro-batches per step follow
// the world size; a size whose DP is not whole, whose global batch does
// not divide, or that is smaller than one model replica is not valid,
// and says why.
func TestFitSizes(t *testing.T) {
	c, err := ParseYAML("plan.yaml", []byte("tensor_model_parallel_size: 2\npipeline_model_parallel_size: 2\nglobal_batch_size: 32\nmicro_batch_size: 2\nnum_layers: 8\nnum_microbatches: 4\nworld_size: 16\nnproc_per_node: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	fits, err := FitSizes(c, []int{2, 4, 6, 8, 16, 32, 128}, 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, tt := range []struct {
		valid          bool
		dp, microBatch int
		problem        string
	}{
		{false, 0, 0, "not a multiple of tp x pp x cp"}, // 2: smaller than a replica
		{true, 1, 16, ""},
		{false, 0, 0, "not a multiple of tp x pp x cp"}, // 6
		{true, 2, 8, ""},
		{true, 4, 4, ""},
		{true, 8, 2, ""},
		{false, 0, 0, "global_batch_size 32 is not a multiple of micro_batch_size 2 x data-parallel size 32"}, // 128
	} {
		f := fits[i]
		if f.Valid != tt.valid || f.DP != tt.dp || f.MicroBatches != tt.microBatch || f.Nodes != f.WorldSize/2 {
			t.Errorf("world %d: valid %v dp %d micro-batches %d nodes %d; want %v %d %d", f.WorldSize, f.Valid, f.DP, f.MicroBatches, f.Nodes, tt.valid, tt.dp, tt.microBatch)
		}
		if tt.problem != "" && !strings.Contains(strings.Join(f.Problems, "\n"), tt.problem) {
			t.Errorf("world %d: problems %q, want %q", f.WorldSize, f.Problems, tt.problem)
		}
		if f.Valid && (f.Layout.TP != 2 || f.Layout.PP != 2 || f.Layout.World != f.WorldSize || len(f.Problems) > 0) {
			t.Errorf("world %d: layout %+v, problems %q", f.WorldSize, f.Layout, f.Problems)
		}
	}
	// The plan itself is left as it was.
	if w, _ := c.Get("world_size").(int); w != 16 {
		t.Errorf("the plan's world_size is now %d", w)
	}
}

// TestFitSizesMemory: a size whose memory estimate is over the device is
// not valid, though every rule holds.
func TestFitSizesMemory(t *testing.T) {
	data, err := os.ReadFile("../configs/llama3-70b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseYAML("llama3-70b.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	fits, err := FitSizes(c, []int{16, 32}, 80<<30, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fits[0].Valid || !strings.Contains(strings.Join(fits[0].Problems, ""), "is over the device's") || fits[0].MemoryBytes <= 80<<30 {
		t.Errorf("16 ranks: %+v, want over the device", fits[0])
	}
	if !fits[1].Valid || fits[1].MemoryBytes >= 80<<30 || fits[1].MemoryBytes == 0 {
		t.Errorf("32 ranks: %+v, want valid", fits[1])
	}
}

func TestParseWorldSizes(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []int
		err  string
	}{
		{"8,16,24,32", []int{8, 16, 24, 32}, ""},
		{"8-32:8", []int{8, 16, 24, 32}, ""},
		{"1-3, 8", []int{1, 2, 3, 8}, ""},
		{"0", nil, "at least 1"},
		{"8-4", nil, "FROM <= TO"},
		{"1-100000", nil, "more than 4096"},
		{"x", nil, "want a world size"},
		{"", nil, "no world size"},
	} {
		got, err := ParseWorldSizes(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%q: %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}
