package topology

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// SizeFit is how a plan fares at one world size when the job is resized:
// the model-parallel dimensions (TP, PP, VPP, CP, EP, ETP) stay as the plan
// says, data parallelism becomes world / (TP x PP x CP), and the number of
// micro-batches per step (gradient accumulation) becomes global batch /
// (micro batch x DP), so that the global batch, and with it the training,
// stays the same.
type SizeFit struct {
	WorldSize int `json:"world_size"`
	// Nodes is the number of nodes at the plan's nproc_per_node (0 when
	// the world does not fill whole nodes).
	Nodes int  `json:"nodes,omitempty"`
	Valid bool `json:"valid"`
	// DP and ExpertDP are the data-parallel sizes; MicroBatches the
	// micro-batches of micro_batch_size each rank runs per step.
	DP              int `json:"dp,omitempty"`
	ExpertDP        int `json:"expt_dp,omitempty"`
	MicroBatches    int `json:"num_microbatches,omitempty"`
	MicroBatchSize  int `json:"micro_batch_size"`
	GlobalBatchSize int `json:"global_batch_size"`
	// MemoryBytes is the estimated peak memory per device (0 without a
	// model to estimate); CapacityBytes the device's (0: unknown).
	MemoryBytes   float64 `json:"memory_bytes,omitempty"`
	CapacityBytes float64 `json:"capacity_bytes,omitempty"`
	// Problems says, in words, why the size is not valid.
	Problems []string `json:"problems,omitempty"`
	// Layout is the layout at this size (valid sizes only).
	Layout Layout `json:"-"`
}

// SetWorldSize sets the plan's world size to w, and drops what followed
// from the old one (nnodes, num_microbatches), which the new size
// recomputes: the one way a plan is resized.
func (c *Config) SetWorldSize(w int) error {
	return errors.Join(c.Set("world_size", w), c.Set("nnodes", nil), c.Set("num_microbatches", nil))
}

// FitSizes evaluates the plan c at each world size: which are valid and
// what each becomes. A size is valid when every rule holds (DP a whole
// number, the global batch divisible by micro batch x DP, ...) and the
// memory estimate, when there is one and the device's capacity is known,
// fits the device. The plan's own world_size, nnodes and
// num_microbatches are replaced by each size's.
func FitSizes(c *Config, worlds []int, capacity float64, opt Options) ([]SizeFit, error) {
	out := make([]SizeFit, 0, len(worlds))
	for _, w := range worlds {
		if w < 1 || w > MaxWorldSize {
			return nil, fmt.Errorf("world size %d: want 1..%d", w, MaxWorldSize)
		}
		sized := *c // Set replaces fields, never writes through them
		if err := sized.SetWorldSize(w); err != nil {
			return nil, err
		}
		opt.PerRank = false
		p, err := MakePlan(&sized, capacity, opt)
		if err != nil {
			return nil, fmt.Errorf("world size %d: %w", w, err)
		}
		s := sized.Resolve()
		f := SizeFit{WorldSize: w, Valid: p.Valid, MicroBatchSize: s.MicroBatch, GlobalBatchSize: s.GlobalBatch, CapacityBytes: capacity}
		if s.PerNode > 0 && w%s.PerNode == 0 {
			f.Nodes = w / s.PerNode
		}
		for _, i := range p.Errors {
			f.Problems = append(f.Problems, i.Message)
		}
		if p.Valid {
			f.DP, f.ExpertDP, f.MicroBatches, f.Layout = p.Parallel.DP, p.Parallel.ExpertDP, p.Parallel.MicroBatches, s.Layout()
		}
		if p.Memory != nil {
			f.MemoryBytes = p.Memory.Estimate.TotalBytes
			if p.Memory.Fits != nil && !*p.Memory.Fits {
				f.Valid = false
				f.Problems = append(f.Problems, fmt.Sprintf("the memory estimate, %s per device, is over the device's %s", gib(f.MemoryBytes), gib(capacity)))
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// ParseWorldSizes reads a list such as "8,16,24,32" or "8-32:8" (from 8
// to 32 in steps of 8); items may mix both forms.
func ParseWorldSizes(s string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		lo, rest, isRange := strings.Cut(item, "-")
		if !isRange {
			n, err := strconv.Atoi(item)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%q: want a world size of at least 1, or FROM-TO[:STEP]", item)
			}
			out = append(out, n)
			continue
		}
		hi, stepS, hasStep := strings.Cut(rest, ":")
		step := 1
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		var err3 error
		if hasStep {
			step, err3 = strconv.Atoi(stepS)
		}
		if err1 != nil || err2 != nil || err3 != nil || a < 1 || b < a || step < 1 {
			return nil, fmt.Errorf("%q: want FROM-TO[:STEP] with 1 <= FROM <= TO and STEP >= 1", item)
		}
		if (b-a)/step >= 4096 {
			return nil, fmt.Errorf("%q: more than 4096 sizes", item)
		}
		for n := a; n <= b; n += step {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no world size given")
	}
	return out, nil
}

// WriteSizesText prints the sizes as a table: valid or not, DP, micro-
// batches per step, memory per device, and what is wrong with the others.
func WriteSizesText(w io.Writer, fits []SizeFit) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-6s %-6s %-6s %-16s %s\n", "world", "nodes", "valid", "dp", "micro-batches", "memory/device")
	for _, f := range fits {
		nodes, valid, dp, mb, mem := "-", "no", "-", "-", "-"
		if f.Nodes > 0 {
			nodes = strconv.Itoa(f.Nodes)
		}
		if f.Valid {
			valid, dp = "yes", strconv.Itoa(f.DP)
			mb = fmt.Sprintf("%d x %d", f.MicroBatches, f.MicroBatchSize)
		}
		if f.MemoryBytes > 0 {
			mem = gib(f.MemoryBytes)
		}
		fmt.Fprintf(&b, "%-10d %-6s %-6s %-6s %-16s %s\n", f.WorldSize, nodes, valid, dp, mb, mem)
		for _, p := range f.Problems {
			fmt.Fprintf(&b, "           - %s\n", p)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
