// Command ddp is data-parallel SGD in Go on gorun's process groups: a
// linear regression on synthetic data, the global batch split across the
// ranks, gradients bucketed and all-reduced asynchronously (Wait before
// the update), so that one rank and N ranks train the same model up to
// float rounding.
//
//	gorun --nproc-per-node=4 --no-python bin/ddp --steps 20
//	gorun --nproc-per-node=gpu --no-python bin/ddp --backend nccl
//
// Fault injection for the watchdog: --hang-rank R --hang-step S makes
// rank R stop calling collectives at step S; --collective-timeout bounds
// each collective. --step-time paces the steps as a real model's compute
// would (fault drills, the chaos suite).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/comm/world"
	"github.com/gorun-dev/gorun/memory"
)

const (
	features    = 64
	globalBatch = 240 // divisible by 1-6, 8, 10, ... ranks; others split unevenly
	buckets     = 4
)

func main() {
	steps := flag.Int("steps", 20, "training steps")
	backend := flag.String("backend", "cpu", "process-group backend: "+world.Backends)
	lr := flag.Float64("lr", 0.05, "learning rate")
	hangRank := flag.Int("hang-rank", -1, "rank that stops calling collectives (fault injection; -1: none)")
	hangStep := flag.Int("hang-step", 0, "step at which --hang-rank stops")
	timeout := flag.Duration("collective-timeout", 0, "bound of each collective (0: "+comm.TimeoutEnv+", else 10m)")
	stepTime := flag.Duration("step-time", 0, "time each step takes at least (a real model's compute; 0: as fast as it goes)")
	flag.Parse()
	if err := world.Check(*backend); err != nil {
		fmt.Fprintln(os.Stderr, "ddp: --backend:", err)
		os.Exit(2)
	}
	if *steps < 1 || *timeout < 0 || *stepTime < 0 {
		fmt.Fprintln(os.Stderr, "ddp: --steps must be at least 1, --collective-timeout and --step-time not negative")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := train(ctx, *backend, *steps, float32(*lr), *hangRank, *hangStep, *timeout, *stepTime); err != nil {
		fmt.Fprintln(os.Stderr, "ddp:", err)
		os.Exit(1)
	}
}

func train(ctx context.Context, backend string, steps int, lr float32, hangRank, hangStep int, timeout, stepTime time.Duration) error {
	env, err := world.Open(ctx, backend, comm.Options{Timeout: timeout})
	if err != nil {
		return err
	}
	defer env.Close()
	rank, world := env.Rank(), env.Size()
	a := env.Allocator
	// The model: features weights and a bias, the same on every rank.
	w := make([]float32, features+1)
	truth := make([]float32, features+1)
	for i := range truth {
		truth[i] = float32(i%7) - 3
	}
	// Gradient buckets: device tensors reduced asynchronously.
	per := (features + 1 + buckets - 1) / buckets
	lo, hi := rank*globalBatch/world, (rank+1)*globalBatch/world
	lossBuf, err := a.Empty(8, 0)
	if err != nil {
		return err
	}
	defer lossBuf.Release()
	lossHost := make([]float64, 1)
	for step := range steps {
		if stepTime > 0 {
			t := time.NewTimer(stepTime)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		if rank == hangRank && step == hangStep {
			fmt.Fprintf(os.Stderr, "rank %d: hanging at step %d (fault injection)\n", rank, step)
			<-ctx.Done()
			return ctx.Err()
		}
		grad := make([]float64, features+1)
		var loss float64
		rng := rand.New(rand.NewPCG(uint64(step), 42)) // every rank draws the same global batch
		x := make([]float32, features)
		for row := range globalBatch {
			var y, pred float32
			for j := range x {
				x[j] = float32(rng.NormFloat64())
				y += truth[j] * x[j]
				pred += w[j] * x[j]
			}
			y += truth[features] + 0.01*float32(rng.NormFloat64())
			pred += w[features]
			if row < lo || row >= hi {
				continue // another rank's share
			}
			diff := float64(pred - y)
			loss += diff * diff
			for j := range x {
				grad[j] += 2 * diff * float64(x[j])
			}
			grad[features] += 2 * diff
		}
		// Bucket the gradient sums and all-reduce them asynchronously.
		var works []*comm.Work
		var tensors []*memory.Tensor
		for b := 0; b < features+1; b += per {
			n := min(per, features+1-b)
			t, err := a.Empty(int64(8*n), 0)
			if err != nil {
				return err
			}
			if err := env.Upload(t, bytesOf(grad[b:b+n])); err != nil {
				return err
			}
			wk, err := env.AllReduce(t, comm.Float64, comm.Sum)
			if err != nil {
				return err
			}
			works, tensors = append(works, wk), append(tensors, t)
		}
		lossHost[0] = loss
		if err := env.Upload(lossBuf, bytesOf(lossHost)); err != nil {
			return err
		}
		lw, err := env.AllReduce(lossBuf, comm.Float64, comm.Sum)
		if err != nil {
			return err
		}
		for i, wk := range works {
			if err := wk.Wait(ctx); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			n := min(per, features+1-i*per)
			if err := env.Download(bytesOf(grad[i*per:i*per+n]), tensors[i]); err != nil {
				return err
			}
			tensors[i].Release()
		}
		if err := lw.Wait(ctx); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if err := env.Download(bytesOf(lossHost), lossBuf); err != nil {
			return err
		}
		for j := range w {
			w[j] -= lr * float32(grad[j]/globalBatch)
		}
		if rank == 0 {
			fmt.Printf("step %d loss=%.6f\n", step, lossHost[0]/globalBatch)
		}
	}
	var checksum float64
	for _, v := range w {
		checksum += float64(v)
	}
	final := lossHost[0] / globalBatch
	if math.IsNaN(final) {
		return errors.New("the loss is NaN")
	}
	if rank == 0 {
		fmt.Printf("final loss=%.6f checksum=%.6f world=%d\n", final, checksum, world)
	}
	return nil
}

// bytesOf views float64s as bytes (little-endian hosts).
func bytesOf(f []float64) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 8*len(f)) }
