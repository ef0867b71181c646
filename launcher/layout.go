package launcher

import (
	"fmt"
	"strconv"

	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/topology"
)

// layoutRanks lays out the job's ranks for a round's world size; nil
// without a layout.
func layoutRanks(cfg *Config, round rendezvous.Round) (*topology.Ranks, error) {
	if cfg.Layout == nil {
		return nil, nil
	}
	l := *cfg.Layout
	l.World = round.WorldSize
	r, err := topology.NewRanks(l)
	if err != nil {
		return nil, fmt.Errorf("the --plan layout does not fit round %d's %d workers: %w", round.Number, round.WorldSize, err)
	}
	return r, nil
}

// layoutEnv is the layout and rank's coordinates in it, for the worker.
func layoutEnv(r *topology.Ranks, rank int) []EnvVar {
	if r == nil {
		return nil
	}
	l, c := r.Layout(), r.Coordinates(rank, 0)
	itoa := strconv.Itoa
	return []EnvVar{
		{"GORUN_TP", itoa(l.TP)}, {"GORUN_PP", itoa(l.PP)}, {"GORUN_VPP", itoa(l.VPP)}, {"GORUN_CP", itoa(l.CP)},
		{"GORUN_EP", itoa(l.EP)}, {"GORUN_ETP", itoa(l.ETP)}, {"GORUN_DP", itoa(l.DP())}, {"GORUN_EXPT_DP", itoa(l.EDP())},
		{"GORUN_ORDER", l.Order},
		{"GORUN_TP_RANK", itoa(c.TP)}, {"GORUN_PP_RANK", itoa(c.PP)}, {"GORUN_DP_RANK", itoa(c.DP)}, {"GORUN_CP_RANK", itoa(c.CP)},
		{"GORUN_EP_RANK", itoa(c.EP)}, {"GORUN_EXPT_TP_RANK", itoa(c.ExpertTP)}, {"GORUN_EXPT_DP_RANK", itoa(c.ExpertDP)},
	}
}
