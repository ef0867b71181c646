package launcher

import (
	"github.com/gorun-dev/gorun/rendezvous"
)

// runPathCode runs the script named by sys.argv[1] as __main__ with the
// remaining arguments, which is what torchrun's --run-path does inside a
// multiprocessing child.
const runPathCode = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"

// Argv returns the worker's command line. Script arguments are passed as
// they are: nothing is appended (torchrun's --local-rank is not).
func (e Entrypoint) Argv() []string {
	var argv []string
	switch {
	case e.NoPython && !e.RunPath:
		argv = []string{e.Script}
	case e.Module:
		argv = append(append(argv, e.Python...), "-u", "-m", e.Script)
	case e.RunPath:
		argv = append(append(argv, e.Python...), "-u", "-c", runPathCode, e.Script)
	default:
		argv = append(append(argv, e.Python...), "-u", e.Script)
	}
	return append(argv, e.Args...)
}

// RunsPython reports whether the workers run a Python interpreter: always but
// with --no-python, where only --run-path still does.
func (e Entrypoint) RunsPython() bool { return !e.NoPython || e.RunPath }

// WorkerSpec is everything needed to start one worker of an attempt.
type WorkerSpec struct {
	LocalRank int      `json:"local_rank"`
	Rank      int      `json:"rank"`
	Argv      []string `json:"argv"`
	// Added lists the variables gorun sets, in a fixed order.
	Added []EnvVar `json:"env"`
	// Env is the worker's whole environment.
	Env []string `json:"-"`
	// ErrorFile is the worker's TORCHELASTIC_ERROR_FILE.
	ErrorFile string `json:"error_file"`
}

// WorkerSpecs returns the workers of one attempt: a round, the restart
// count, and where each local rank writes its error file.
// With a plan (cfg.Plan), each worker also gets the layout and its
// coordinates; a layout that does not fit the round's world size is an
// error.
func WorkerSpecs(cfg *Config, shared []EnvVar, round rendezvous.Round, restartCount int, errorFile func(localRank int) string) ([]WorkerSpec, error) {
	ranks, fit, err := layoutRanks(cfg, round)
	if err != nil {
		return nil, err
	}
	argv := cfg.Entrypoint.Argv()
	specs := make([]WorkerSpec, cfg.NprocPerNode)
	for lr := range specs {
		ef := errorFile(lr)
		added := append(rankEnv(cfg, round, restartCount, lr, ef), layoutEnv(ranks, fit, round.BaseRank+lr)...)
		if cfg.VirtualLocalRank {
			if added, err = virtualRankEnv(cfg, added, lr); err != nil {
				return nil, err
			}
		}
		added = append(added, shared...)
		specs[lr] = WorkerSpec{
			LocalRank: lr,
			Rank:      round.BaseRank + lr,
			Argv:      argv,
			Added:     added,
			Env:       withEnv(withoutSecrets(cfg.Environ), added),
			ErrorFile: ef,
		}
	}
	return specs, nil
}
