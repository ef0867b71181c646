package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/leakcheck"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/internal/testkit/torchpy"
)

// make chaos sets these; without them, TestChaosShort runs the short
// version that make test runs.
var (
	seed   = flag.Uint64("chaos.seed", 0, "the suite's seed (0: GORUN_CHAOS_SEED, else 1)")
	rounds = flag.Int("chaos.rounds", 0, "jobs of the full suite (0: the short version only)")
	faults = flag.Int("chaos.faults", 2, "faults per job of the full suite")
	kinds  = flag.String("chaos.kinds", "all", "faults of the full suite: a comma-separated list of worker, agent, stop, cut, member")
	torch  = flag.Int("chaos.torch-every", 4, "every Nth job of the full suite runs the PyTorch example (0: none)")
	// storeLog is etcd's log level in the jobs' stores (--rdzv-conf
	// store_log_level): a failed job's transcript then has its members'
	// lines.
	storeLog = flag.String("chaos.store-log", "", "etcd's log level in each job's store (debug, info, warn, error; default: silent)")
)

// bins holds gorun (with gorun-etcd beside it) and examples/ddp, built
// for the run.
var bins string

func TestMain(m *testing.M) {
	flag.Parse()
	gorun, remove, err := proctest.BuildGorun("../../..", "examples/ddp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins = filepath.Dir(gorun)
	code := leakcheck.Main(m, 5*time.Second)
	remove()
	os.Exit(code)
}

// config is the suite's configuration for this run.
func config(t *testing.T, rounds, faults int) Config {
	s := *seed
	if s == 0 {
		s = 1
		if v := os.Getenv("GORUN_CHAOS_SEED"); v != "" {
			var err error
			if s, err = strconv.ParseUint(v, 10, 64); err != nil {
				t.Fatalf("GORUN_CHAOS_SEED=%q: want a number", v)
			}
		}
	}
	cfg := Config{Seed: s, Rounds: rounds, FaultsPerRound: faults,
		Gorun: filepath.Join(bins, "gorun"), DDP: filepath.Join(bins, "ddp"), Logf: t.Logf, Verbose: os.Getenv("GORUN_CHAOS_VERBOSE") == "1", StoreLogLevel: *storeLog}
	if c := torchpy.Find("../../.."); c.Missing != "" {
		t.Logf("NOTE: no PyTorch: every round runs bin/ddp: %s", c)
	} else {
		py := c.Python
		cfg.Python, cfg.TrainScript, cfg.TorchEvery = py, "../../../examples/pytorch/train_ddp.py", *torch
	}
	return cfg
}

// check fails t on anything the report found wrong.
func check(t *testing.T, rep *Report, err error) {
	t.Helper()
	if rep != nil {
		fmt.Printf("\n%s\n%s\n", rep.Rounds(), rep.Table())
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems() {
		t.Error(p)
	}
}

// TestChaosShort is the short version of the suite, part of make test:
// one job of bin/ddp, three faults (the seed's first ones).
func TestChaosShort(t *testing.T) {
	if *rounds > 0 {
		t.Skip("the full suite runs instead (-chaos.rounds)")
	}
	cfg := config(t, 1, 3)
	cfg.Python = ""
	rep, err := Run(context.Background(), t, cfg)
	check(t, rep, err)
}

// TestChaos is the full suite: make chaos SEED=1 ROUNDS=20.
func TestChaos(t *testing.T) {
	if *rounds == 0 {
		t.Skip("the full suite runs with make chaos (-chaos.rounds N)")
	}
	cfg := config(t, *rounds, *faults)
	var err error
	if cfg.Kinds, err = ParseKinds(*kinds); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), t, cfg)
	check(t, rep, err)
	if rep != nil && len(rep.Problems()) == 0 {
		t.Logf("seed %d: %d jobs, all clean", rep.Seed, len(rep.rounds))
	}
}
