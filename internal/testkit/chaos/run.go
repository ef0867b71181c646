package chaos

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/nettest"
)

// Run runs the suite's rounds on three hosts made for it (it skips tb,
// saying why, where network namespaces cannot be made) and reports them.
func Run(ctx context.Context, tb testing.TB, cfg Config) (*Report, error) {
	switch {
	case cfg.Rounds < 1 || cfg.FaultsPerRound < 1:
		return nil, fmt.Errorf("chaos: %d rounds of %d faults; want at least 1 of each", cfg.Rounds, cfg.FaultsPerRound)
	case cfg.Gorun == "" || cfg.DDP == "":
		return nil, errors.New("chaos: the gorun and ddp binaries are needed")
	case cfg.Python != "" && cfg.TrainScript == "":
		return nil, errors.New("chaos: Python given without the PyTorch example's path")
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	start := time.Now()
	rn := &runner{cfg: cfg, hosts: nettest.NewHosts(tb, nodes), tb: tb, dir: tb.TempDir()}
	rounds := scripts(cfg)
	var err error
	if rn.want, err = references(ctx, cfg, rounds); err != nil {
		return nil, err
	}
	rep := &Report{Seed: cfg.Seed}
	for r, p := range rounds {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		cfg.Logf("round %d: %s", r, p)
		res := rn.runRound(ctx, r, p)
		rep.rounds = append(rep.rounds, res)
		cfg.Logf("round %d: %s in %.1fs %s", r, res.verdict, res.duration.Seconds(), res.final)
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// references runs each workload once, without faults, on this host: the
// final values every round must reach. bin/ddp trains the same model on
// any world size; the PyTorch example draws each rank's data from its
// rank, so it has one reference per world size.
func references(ctx context.Context, cfg Config, rounds []roundScript) (expect, error) {
	var e expect
	one := func(nproc int, argv ...string) (final, error) {
		args := append([]string{"--nproc-per-node=" + strconv.Itoa(nproc), "--no-python"}, argv...)
		cmd := exec.CommandContext(ctx, cfg.Gorun, args...)
		cmd.Env = agentEnv()
		out, err := cmd.Output()
		fs := finals(linesOf(out))
		if err != nil || len(fs) != 1 {
			return final{}, fmt.Errorf("chaos: reference run %v: %v\n%s", args, err, out)
		}
		return fs[0], nil
	}
	var err error
	if e.ddp, err = one(1, cfg.DDP, "--steps", strconv.Itoa(ddpSteps)); err != nil {
		return e, err
	}
	e.torch = map[int]final{}
	for _, p := range rounds {
		if p.workload != TorchDDP {
			continue
		}
		for _, w := range []int{2, 3} {
			if e.torch[w], err = one(w, cfg.Python, "-u", cfg.TrainScript, "--steps", strconv.Itoa(torchSteps)); err != nil {
				return e, err
			}
		}
		break
	}
	return e, nil
}

// linesOf splits a finished command's output into lines.
func linesOf(out []byte) []line {
	var ls []line
	start := 0
	for i, c := range out {
		if c == '\n' {
			ls = append(ls, line{text: string(out[start:i])})
			start = i + 1
		}
	}
	return ls
}
