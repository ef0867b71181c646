package launcher

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/topology"
)

// LayoutPlan is the job's parallel layout (gorun --plan) at every world
// size the job may run at. TP, PP, VPP, CP and EP are the plan's at every
// size; data parallelism and the micro-batches per step follow the size
// (topology.FitSizes).
type LayoutPlan struct {
	// Path names the plan file, for messages.
	Path string
	// Fits holds each world size the job may run at, valid or not,
	// ascending.
	Fits []topology.SizeFit
}

// At returns the fit of world size w, or an error that says why the
// layout does not fit it.
func (p *LayoutPlan) At(w int) (topology.SizeFit, error) {
	for _, f := range p.Fits {
		if f.WorldSize != w {
			continue
		}
		if !f.Valid {
			return f, setting.Errorf("the %s %s layout is not valid for %d workers:\n  %s", setting.Name("Plan"), p.Path, w, strings.Join(f.Problems, "\n  "))
		}
		return f, nil
	}
	return topology.SizeFit{}, setting.Errorf("the %s %s layout was not evaluated for %d workers", setting.Name("Plan"), p.Path, w)
}

// ValidNodes returns the node counts, at nproc workers per node, at which
// the layout is valid, ascending.
func (p *LayoutPlan) ValidNodes(nproc int) []int {
	var out []int
	for _, f := range p.Fits {
		if f.Valid && nproc > 0 && f.WorldSize%nproc == 0 {
			out = append(out, f.WorldSize/nproc)
		}
	}
	slices.Sort(out)
	return out
}

// layoutRanks lays out the job's ranks for a round's world size; nil
// without a plan.
func layoutRanks(cfg *Config, round rendezvous.Round) (*topology.Ranks, topology.SizeFit, error) {
	if cfg.Plan == nil {
		return nil, topology.SizeFit{}, nil
	}
	fit, err := cfg.Plan.At(round.WorldSize)
	if err != nil {
		return nil, fit, fmt.Errorf("round %d: %w", round.Number, err)
	}
	r, err := topology.NewRanks(fit.Layout)
	if err != nil {
		return nil, fit, setting.Errorf("the %s %s layout does not fit round %d's %d workers: %w", setting.Name("Plan"), cfg.Plan.Path, round.Number, round.WorldSize, err)
	}
	return r, fit, nil
}

// layoutEnv is the layout and rank's coordinates in it, for the worker.
func layoutEnv(r *topology.Ranks, fit topology.SizeFit, rank int) []EnvVar {
	if r == nil {
		return nil
	}
	l, c := r.Layout(), r.Coordinates(rank, 0)
	itoa := strconv.Itoa
	return []EnvVar{
		{workerenv.LayoutTP, itoa(l.TP)}, {workerenv.LayoutPP, itoa(l.PP)}, {workerenv.LayoutVPP, itoa(l.VPP)}, {workerenv.LayoutCP, itoa(l.CP)},
		{workerenv.LayoutEP, itoa(l.EP)}, {workerenv.LayoutETP, itoa(l.ETP)}, {workerenv.LayoutDP, itoa(l.DP())}, {workerenv.LayoutExpertDP, itoa(l.EDP())},
		{workerenv.LayoutOrder, l.Order},
		{workerenv.LayoutTPRank, itoa(c.TP)}, {workerenv.LayoutPPRank, itoa(c.PP)}, {workerenv.LayoutDPRank, itoa(c.DP)}, {workerenv.LayoutCPRank, itoa(c.CP)},
		{workerenv.LayoutEPRank, itoa(c.EP)}, {workerenv.LayoutExpertTPRank, itoa(c.ExpertTP)}, {workerenv.LayoutExpertDPRank, itoa(c.ExpertDP)},
		{workerenv.LayoutMicroBatchSize, itoa(fit.MicroBatchSize)}, {workerenv.LayoutGlobalBatch, itoa(fit.GlobalBatchSize)},
		{workerenv.LayoutMicroBatches, itoa(fit.MicroBatches)},
	}
}
