package scheduler

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// SlurmStep is one running step of a Slurm job that may be a gorun job:
// its run id (JOB.STEP, what gorun takes as --rdzv-id inside it) and the
// addresses of its store, as each of its gorun agents computes them.
type SlurmStep struct {
	RunID string
	// Endpoints are the step's store: the first host's, or the first
	// three hosts' for a step of three nodes or more; empty for a step of
	// one node, which has no store.
	Endpoints []string
	// Nodes is the step's node count.
	Nodes int
	// Name is the step's name: srun's --job-name, else the basename of
	// the program srun ran ("gorun" for a gorun step).
	Name string
}

// IsGorun says whether the step runs gorun, by its name (srun names a
// step after the program it runs).
func (s SlurmStep) IsGorun() bool { return strings.HasPrefix(s.Name, "gorun") }

// squeueTimeout bounds the look-up of a job's steps.
const squeueTimeout = 10 * time.Second

// RunningSlurmSteps asks Slurm (squeue) for the running steps of job
// jobID, but for the batch, extern and interactive ones and for the step
// the caller runs in (exclude, "" for none).
func RunningSlurmSteps(ctx context.Context, jobID, exclude string) ([]SlurmStep, error) {
	ctx, cancel := context.WithTimeout(ctx, squeueTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "squeue", "--steps", "--jobs="+jobID, "--noheader", "--format=%i %N %j").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("%w: the steps of Slurm job %s (squeue): %v", ErrScheduler, jobID, err)
	}
	return parseSlurmSteps(jobID, exclude, string(out))
}

// parseSlurmSteps reads squeue's "%i %N %j" lines for the steps of jobID
// (a step's name, last, may hold spaces).
func parseSlurmSteps(jobID, exclude, out string) ([]SlurmStep, error) {
	var steps []SlurmStep
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(strings.TrimSpace(line), " ", 3)
		if len(f) < 2 {
			continue
		}
		name := ""
		if len(f) == 3 {
			name = strings.TrimSpace(f[2])
		}
		job, step, ok := strings.Cut(f[0], ".")
		if !ok || job != jobID || f[0] == exclude {
			continue
		}
		if _, err := strconv.Atoi(step); err != nil {
			continue // batch, extern, interactive: no gorun of its own
		}
		hosts, err := ExpandHostlist(f[1])
		if err != nil {
			return nil, fmt.Errorf("%w: squeue: step %s: %v", ErrScheduler, f[0], err)
		}
		s := SlurmStep{RunID: f[0], Nodes: len(hosts), Name: name}
		if len(hosts) > 1 {
			port := strconv.Itoa(StorePort(s.RunID))
			for _, h := range hosts[:min(3, len(hosts))] {
				s.Endpoints = append(s.Endpoints, net.JoinHostPort(h, port))
			}
			if len(hosts) == 2 {
				s.Endpoints = s.Endpoints[:1]
			}
		}
		steps = append(steps, s)
	}
	return steps, nil
}
