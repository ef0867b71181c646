// Package commbench is `gorun bench comm`: collectives timed between
// worker processes launched by gorun, like nccl-tests, with every result
// checked, and the floors of this machine (loopback TCP, memcpy) and gloo
// measured in the same run.
package commbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/comm/world"
	"github.com/gorun-dev/gorun/memory"
)

// Ops are the operations, named as nccl-tests names them.
var Ops = []string{"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv", "barrier"}

// WorkerConfig is what every worker runs.
type WorkerConfig struct {
	Backend       string
	Ops           []string
	Sizes         []int64
	DType         comm.DType
	Iters, Warmup int
	JSON          bool
}

// Row is one measured operation and size.
type Row struct {
	Op        string  `json:"op"`
	SizeBytes int64   `json:"size_bytes"`
	DType     string  `json:"dtype"`
	TimeUS    float64 `json:"time_us"`
	AlgBW     float64 `json:"algbw_GBps"`
	BusBW     float64 `json:"busbw_GBps"`
	Correct   bool    `json:"correct"`
	// Slow lists ranks whose own median time was over 1.2x the median of
	// the ranks' medians.
	Slow []int `json:"slow_ranks,omitempty"`
}

// Report is rank 0's output.
type Report struct {
	Backend string `json:"backend"`
	World   int    `json:"world"`
	Results []Row  `json:"results"`
	// SlowRanks are ranks slow in most results.
	SlowRanks []int `json:"slow_ranks"`
}

// busFactor converts algorithm bandwidth to bus bandwidth as nccl-tests
// define it.
func busFactor(op string, n int) float64 {
	w := float64(n)
	switch op {
	case "all_reduce":
		return 2 * (w - 1) / w
	case "all_gather", "reduce_scatter", "all_to_all":
		return (w - 1) / w
	case "barrier":
		return 0
	}
	return 1
}

// RunWorker is one rank of the benchmark.
func RunWorker(ctx context.Context, cfg WorkerConfig, out io.Writer) error {
	env, err := world.Open(ctx, cfg.Backend, comm.Options{Timeout: 5 * time.Minute})
	if err != nil {
		return err
	}
	defer env.Close()
	rep := Report{Backend: env.Backend, World: env.Size()}
	slowCount := map[int]int{}
	for _, op := range cfg.Ops {
		sizes := cfg.Sizes
		if op == "barrier" {
			sizes = []int64{0}
		}
		for _, size := range sizes {
			row, err := measure(ctx, env, op, size, cfg)
			if err != nil {
				return fmt.Errorf("%s of %d bytes: %w", op, size, err)
			}
			for _, r := range row.Slow {
				slowCount[r]++
			}
			rep.Results = append(rep.Results, row)
		}
	}
	for r, n := range slowCount {
		if 2*n > len(rep.Results) {
			rep.SlowRanks = append(rep.SlowRanks, r)
		}
	}
	sort.Ints(rep.SlowRanks)
	if env.Rank() != 0 {
		return nil
	}
	if cfg.JSON {
		return json.NewEncoder(out).Encode(rep)
	}
	fmt.Fprintf(out, "# gorun bench comm: backend %s, %d ranks, %s\n", rep.Backend, rep.World, cfg.DType)
	fmt.Fprintf(out, "%16s %14s %12s %12s %12s %8s\n", "op", "size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "correct")
	for _, r := range rep.Results {
		fmt.Fprintf(out, "%16s %14d %12.1f %12.3f %12.3f %8v\n", r.Op, r.SizeBytes, r.TimeUS, r.AlgBW, r.BusBW, r.Correct)
	}
	if len(rep.SlowRanks) > 0 {
		fmt.Fprintf(out, "# consistently slower ranks: %v\n", rep.SlowRanks)
	}
	return nil
}

// measure times one op and size on every rank and checks its result.
func measure(ctx context.Context, env *comm.Env, op string, size int64, cfg WorkerConfig) (Row, error) {
	w, r := env.Size(), env.Rank()
	es := int64(cfg.DType.Size())
	unit := int64(w) * es
	size = max(unit, size/unit*unit)
	if op == "barrier" {
		size = 0
	}
	a := env.Allocator
	alloc := func(n int64) (*memory.Tensor, error) { return a.Empty(max(n, es), 0) }
	var in, outT *memory.Tensor
	var err error
	switch op {
	case "all_gather":
		in, err = alloc(size / int64(w))
		if err == nil {
			outT, err = alloc(size)
		}
	case "reduce_scatter":
		in, err = alloc(size)
		if err == nil {
			outT, err = alloc(size / int64(w))
		}
	default:
		in, err = alloc(size)
		if err == nil {
			outT, err = alloc(size)
		}
	}
	if err != nil {
		return Row{}, err
	}
	defer in.Release()
	defer outT.Release()
	// Zeros: memory from the allocator holds whatever was there, and
	// bytes of integers read as floats are denormals, which x86 adds a
	// hundred times slower.
	for _, t := range []*memory.Tensor{in, outT} {
		if err := env.Upload(t, make([]byte, t.Size())); err != nil {
			return Row{}, err
		}
	}
	run := func() error {
		var wk *comm.Work
		var err error
		switch op {
		case "all_reduce":
			wk, err = env.AllReduce(in, cfg.DType, comm.Sum)
		case "all_gather":
			wk, err = env.AllGather(outT, in)
		case "reduce_scatter":
			wk, err = env.ReduceScatter(outT, in, cfg.DType, comm.Sum)
		case "all_to_all":
			wk, err = env.AllToAll(outT, in)
		case "broadcast":
			wk, err = env.Broadcast(in, 0)
		case "barrier":
			wk, err = env.Barrier()
		case "send_recv":
			return sendRecv(ctx, env, in, outT)
		default:
			return fmt.Errorf("op %q: want one of %v", op, Ops)
		}
		return comm.Sync(ctx)(wk, err)
	}
	for range cfg.Warmup {
		if err := run(); err != nil {
			return Row{}, err
		}
	}
	times, err := alloc(int64(cfg.Iters) * 8)
	if err != nil {
		return Row{}, err
	}
	defer times.Release()
	own := make([]float64, cfg.Iters)
	for i := range cfg.Iters {
		if err := comm.Sync(ctx)(env.Barrier()); err != nil {
			return Row{}, err
		}
		t0 := time.Now()
		if err := run(); err != nil {
			return Row{}, err
		}
		own[i] = time.Since(t0).Seconds()
	}
	// The collective is done when the slowest rank is: the max per
	// iteration; and each rank's median, to name slow ranks.
	if err := env.Upload(times, bytesOf(own)); err != nil {
		return Row{}, err
	}
	if err := comm.Sync(ctx)(env.AllReduce(times, comm.Float64, comm.Max)); err != nil {
		return Row{}, err
	}
	slowest := make([]float64, cfg.Iters)
	if err := env.Download(bytesOf(slowest), times); err != nil {
		return Row{}, err
	}
	slow, err := slowRanks(ctx, env, median(own))
	if err != nil {
		return Row{}, err
	}
	t := median(slowest)
	correct, err := check(ctx, env, op, in, outT, cfg.DType, r, w, run)
	if err != nil {
		return Row{}, err
	}
	row := Row{Op: op, SizeBytes: size, DType: cfg.DType.String(), TimeUS: t * 1e6, Correct: correct, Slow: slow}
	if t > 0 && size > 0 {
		row.AlgBW = float64(size) / t / 1e9
		row.BusBW = row.AlgBW * busFactor(op, w)
	}
	return row, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
