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
// rank R stop calling collectives at step S (until the job is asked to
// stop: GORUN_STOP_FILE, GORUN_STOP_SIGNAL); --collective-timeout bounds
// each collective. --step-time paces the steps as a real model's compute
// would (fault drills, the chaos suite).
//
// Preemption: with --checkpoint DIR the job resumes from DIR/ddp.ckpt
// when it is there ("resumed at step N"), and stops cleanly when gorun
// asks the job to stop (GORUN_STOP_FILE appears, or GORUN_STOP_SIGNAL's
// signal comes): after each step every rank calls comm.Preemption.Agree,
// so all stop after the same step; rank 0 saves the weights and the next
// step ("preempted: saved step N to DIR") and every rank exits 0. The
// steps are deterministic (each draws its batch from the step number), so
// a resumed run ends with the same final line as an uninterrupted one.
// Each step is also reported in GORUN_PROGRESS_FILE.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
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
	checkpoint := flag.String("checkpoint", "", "directory of "+checkpointFile+": resume from it if there, save to it when gorun asks the job to stop")
	flag.Parse()
	if err := world.Check(*backend); err != nil {
		fmt.Fprintln(os.Stderr, "ddp: --backend:", err)
		os.Exit(2)
	}
	if *steps < 1 || *timeout < 0 || *stepTime < 0 {
		fmt.Fprintln(os.Stderr, "ddp: --steps must be at least 1, --collective-timeout and --step-time not negative")
		os.Exit(2)
	}
	pre, err := comm.WatchPreemption(comm.NewPreemptionConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, "ddp:", err)
		os.Exit(2)
	}
	// The stop signal only asks for a checkpoint at the agreed step: it
	// must not cancel the training.
	var cancelOn []os.Signal
	for _, sig := range []os.Signal{syscall.SIGINT, syscall.SIGTERM} {
		if sig != pre.Signal() {
			cancelOn = append(cancelOn, sig)
		}
	}
	sctx, stop := signal.NotifyContext(context.Background(), cancelOn...)
	// The stop signal without the stop file is a plain stop (gorun ending
	// the attempt after another rank failed): it cancels, as before.
	ctx, cancel := pre.Context(sctx)
	err = train(ctx, pre, config{
		backend: *backend, steps: *steps, lr: float32(*lr), hangRank: *hangRank, hangStep: *hangStep,
		timeout: *timeout, stepTime: *stepTime, checkpoint: *checkpoint,
	})
	cancel()
	stop()
	pre.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ddp:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	backend            string
	steps              int
	lr                 float32
	hangRank, hangStep int
	timeout, stepTime  time.Duration
	checkpoint         string // "": neither resume nor save
}

func train(ctx context.Context, pre *comm.Preemption, cfg config) error {
	steps, lr, hangRank, hangStep, stepTime := cfg.steps, cfg.lr, cfg.hangRank, cfg.hangStep, cfg.stepTime
	env, err := world.Open(ctx, cfg.backend, comm.Options{Timeout: cfg.timeout})
	if err != nil {
		return err
	}
	defer env.Close()
	// This program takes SIGTERM itself: its watchdog must know of it too.
	stopping := context.AfterFunc(ctx, env.Stopping)
	defer stopping()
	rank, world := env.Rank(), env.Size()
	a := env.Allocator
	// The model: features weights and a bias, the same on every rank.
	w := make([]float32, features+1)
	lossHost := make([]float64, 1) // the last step's loss, summed over the global batch
	start := 0
	if cfg.checkpoint != "" {
		if start, err = resume(ctx, env, cfg.checkpoint, w, lossHost); err != nil {
			return err
		}
		if start > 0 && rank == 0 {
			fmt.Printf("resumed at step %d\n", start)
		}
	}
	progress := comm.NewProgressReporter()
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
	for step := start; step < steps; step++ {
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
			return hang(ctx, pre)
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
		_ = progress.Step(step) // a failure is reported once, and training goes on
		// Every rank checks at the same point of every step, so all get
		// the same answer after the same step. A stop after the last step
		// is no stop: the job is done.
		stopNow, err := pre.Agree(ctx, env, step)
		if err != nil {
			return err
		}
		if stopNow && step+1 < steps {
			return preempted(ctx, env, cfg.checkpoint, step+1, w, lossHost[0])
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

// hang stops calling collectives until ctx ends or the job is asked to
// stop (the peers wait in their collective until it times out; a stop
// request ends this rank, which ends theirs).
func hang(ctx context.Context, pre *comm.Preemption) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !pre.Requested() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return errors.New("asked to stop while hanging (fault injection)")
}

// checkpointFile is the checkpoint's name in --checkpoint's directory.
const checkpointFile = "ddp.ckpt"

// checkpointMagic starts a checkpoint file (version 1): then the next
// step (int64), the last step's summed loss (float64), the number of
// weights (uint32) and the weights (float32), all little-endian.
const checkpointMagic = "gorun-ddp-ckpt-1"

// resume loads dir's checkpoint, if there is one, into w and lossHost and
// returns the next step (0 without one). Rank 0 reads the file and
// broadcasts it, so dir need only be on rank 0's node.
func resume(ctx context.Context, env *comm.Env, dir string, w []float32, lossHost []float64) (int, error) {
	// buf: status (0: none, 1: loaded, -1: rank 0 failed), next step,
	// loss, weights; float64 holds each exactly.
	buf := make([]float64, 3+len(w))
	var readErr error
	if env.Rank() == 0 {
		next, loss, err := readCheckpoint(filepath.Join(dir, checkpointFile), w)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			buf[0], readErr = -1, err
		default:
			buf[0], buf[1], buf[2] = 1, float64(next), loss
			for i, v := range w {
				buf[3+i] = float64(v)
			}
		}
	}
	t, err := env.Allocator.Empty(int64(8*len(buf)), 0)
	if err != nil {
		return 0, err
	}
	defer t.Release()
	if err := env.Upload(t, bytesOf(buf)); err != nil {
		return 0, err
	}
	if err := comm.Sync(ctx)(env.Broadcast(t, 0)); err != nil {
		return 0, fmt.Errorf("broadcast the checkpoint: %w", err)
	}
	if err := env.Download(bytesOf(buf), t); err != nil {
		return 0, err
	}
	switch {
	case readErr != nil:
		return 0, readErr
	case buf[0] < 0:
		return 0, errors.New("rank 0 could not read the checkpoint")
	case buf[0] == 0:
		return 0, nil
	}
	for i := range w {
		w[i] = float32(buf[3+i])
	}
	lossHost[0] = buf[2]
	return int(buf[1]), nil
}

// preempted ends the training after the agreed step: rank 0 saves the
// checkpoint (when there is a --checkpoint), and every rank waits in a
// barrier until it is written, so that the job is done only when the
// checkpoint is complete.
func preempted(ctx context.Context, env *comm.Env, dir string, next int, w []float32, lossSum float64) error {
	rank := env.Rank()
	fmt.Printf("rank %d stopping at step %d\n", rank, next)
	var saveErr error
	if rank == 0 && dir != "" {
		saveErr = writeCheckpoint(dir, next, lossSum, w)
	}
	if err := comm.Sync(ctx)(env.Barrier()); err != nil {
		return errors.Join(saveErr, fmt.Errorf("barrier after the checkpoint: %w", err))
	}
	switch {
	case saveErr != nil:
		return saveErr
	case rank != 0:
	case dir == "":
		fmt.Printf("preempted at step %d: no --checkpoint, nothing saved\n", next)
	default:
		fmt.Printf("preempted: saved step %d to %s\n", next, dir)
	}
	return nil
}

// writeCheckpoint replaces dir's checkpoint atomically: a temporary file,
// synced, renamed over the old one, and the directory synced.
func writeCheckpoint(dir string, next int, lossSum float64, w []float32) error {
	data := []byte(checkpointMagic)
	data = binary.LittleEndian.AppendUint64(data, uint64(next))
	data = binary.LittleEndian.AppendUint64(data, math.Float64bits(lossSum))
	data = binary.LittleEndian.AppendUint32(data, uint32(len(w)))
	for _, v := range w {
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	path := filepath.Join(dir, checkpointFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	_, err = f.Write(data)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("checkpoint: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() // the rename survives a crash; best effort
		d.Close()
	}
	return nil
}

// readCheckpoint reads path into w and returns the next step and the
// loss; a missing file is os.ErrNotExist.
func readCheckpoint(path string, w []float32) (next int, lossSum float64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	head := len(checkpointMagic) + 8 + 8 + 4
	if len(data) < head || string(data[:len(checkpointMagic)]) != checkpointMagic {
		return 0, 0, fmt.Errorf("checkpoint %s: not a %s file", path, checkpointMagic)
	}
	b := data[len(checkpointMagic):]
	next = int(binary.LittleEndian.Uint64(b))
	lossSum = math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
	if n := binary.LittleEndian.Uint32(b[16:]); int(n) != len(w) || len(data) != head+4*len(w) {
		return 0, 0, fmt.Errorf("checkpoint %s: %d weights in %d bytes; this model has %d", path, n, len(data), len(w))
	}
	for i := range w {
		w[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[head+4*i:]))
	}
	if next < 1 {
		return 0, 0, fmt.Errorf("checkpoint %s: next step %d", path, next)
	}
	return next, lossSum, nil
}

// bytesOf views float64s as bytes (little-endian hosts).
func bytesOf(f []float64) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 8*len(f)) }
