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
	alloc := func(n int64) (*memory.Tensor, error) { return env.Allocator.Empty(max(n, es), 0) }
	in, outT, err := buffers(env, op, size, alloc)
	if err != nil {
		return Row{}, err
	}
	defer in.Release()
	defer outT.Release()
	run := collective(ctx, env, op, in, outT, cfg.DType)
	for range cfg.Warmup {
		if err := run(); err != nil {
			return Row{}, err
		}
	}
	t, slow, err := timeIters(ctx, env, run, cfg.Iters, alloc)
	if err != nil {
		return Row{}, err
	}
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

// buffers allocates op's input and output for a collective of size bytes
// (an all-gather's input and a reduce-scatter's output are a rank's
// share), zeroed: memory from the allocator holds whatever was there,
// and bytes of integers read as floats are denormals, which x86 adds a
// hundred times slower.
func buffers(env *comm.Env, op string, size int64, alloc func(int64) (*memory.Tensor, error)) (in, out *memory.Tensor, err error) {
	inSize, outSize := size, size
	switch op {
	case "all_gather":
		inSize = size / int64(env.Size())
	case "reduce_scatter":
		outSize = size / int64(env.Size())
	}
	if in, err = alloc(inSize); err != nil {
		return nil, nil, err
	}
	if out, err = alloc(outSize); err != nil {
		in.Release()
		return nil, nil, err
	}
	for _, t := range []*memory.Tensor{in, out} {
		if err := env.Upload(t, make([]byte, t.Size())); err != nil {
			in.Release()
			out.Release()
			return nil, nil, err
		}
	}
	return in, out, nil
}

// collective is one run of op on in and out, waited for.
func collective(ctx context.Context, env *comm.Env, op string, in, out *memory.Tensor, dtype comm.DType) func() error {
	return func() error {
		var wk *comm.Work
		var err error
		switch op {
		case "all_reduce":
			wk, err = env.AllReduce(in, dtype, comm.Sum)
		case "all_gather":
			wk, err = env.AllGather(out, in)
		case "reduce_scatter":
			wk, err = env.ReduceScatter(out, in, dtype, comm.Sum)
		case "all_to_all":
			wk, err = env.AllToAll(out, in)
		case "broadcast":
			wk, err = env.Broadcast(in, 0)
		case "barrier":
			wk, err = env.Barrier()
		case "send_recv":
			return sendRecv(ctx, env, in, out)
		default:
			return fmt.Errorf("op %q: want one of %v", op, Ops)
		}
		return comm.Sync(ctx)(wk, err)
	}
}

// timeIters times iters runs, each after a barrier. The collective is
// done when the slowest rank is: t is the median over the iterations of
// the slowest rank's time; slow names the ranks whose own median stands
// out.
func timeIters(ctx context.Context, env *comm.Env, run func() error, iters int, alloc func(int64) (*memory.Tensor, error)) (t float64, slow []int, err error) {
	times, err := alloc(int64(iters) * 8)
	if err != nil {
		return 0, nil, err
	}
	defer times.Release()
	own := make([]float64, iters)
	for i := range iters {
		if err := comm.Sync(ctx)(env.Barrier()); err != nil {
			return 0, nil, err
		}
		t0 := time.Now()
		if err := run(); err != nil {
			return 0, nil, err
		}
		own[i] = time.Since(t0).Seconds()
	}
	if err := env.Upload(times, bytesOf(own)); err != nil {
		return 0, nil, err
	}
	if err := comm.Sync(ctx)(env.AllReduce(times, comm.Float64, comm.Max)); err != nil {
		return 0, nil, err
	}
	slowest := make([]float64, iters)
	if err := env.Download(bytesOf(slowest), times); err != nil {
		return 0, nil, err
	}
	if slow, err = slowRanks(ctx, env, median(own)); err != nil {
		return 0, nil, err
	}
	return median(slowest), slow, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
