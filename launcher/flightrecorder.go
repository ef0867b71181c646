package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/watchdog"
)

// flightRecorderWait bounds the wait for the other nodes' reports.
const flightRecorderWait = 10 * time.Second

// reportFlightRecorders prints the verdict of the flight-recorder dumps that the
// workers of a failed round left in dir, merged with every other node's
// when the rendezvous can gather them: the same as `gorun trace` over all
// of them. Nothing is printed when no worker dumped.
func (a *Agent) reportFlightRecorders(ctx context.Context, round rendezvous.Round, dir string) {
	cfg := &a.cfg
	dumps, _ := watchdog.ReadDumps(dir) // none: not a collective's failure
	if len(dumps) == 0 {
		return // nothing of this node's to merge (a PyTorch job writes none here)
	}
	nodes := 1
	if hr, ok := a.rdzv.(FlightRecorderSharer); ok && round.GroupWorldSize > 1 {
		trimmed := make([]watchdog.Dump, len(dumps))
		for i, d := range dumps {
			trimmed[i] = watchdog.Trim(d)
		}
		b, _ := json.Marshal(trimmed)
		reports, err := hr.ShareFlightRecorders(ctx, round, b, flightRecorderWait)
		cfg.Log.Debugf("flight recorder: the reports of %d of %d nodes", len(reports), round.GroupWorldSize)
		if err != nil {
			cfg.Log.Warnf("flight recorder: could not gather the other nodes' dumps: %v", err)
		} else {
			dumps, nodes = nil, len(reports)
			for _, rep := range reports {
				var ds []watchdog.Dump
				if json.Unmarshal(rep, &ds) == nil {
					dumps = append(dumps, ds...)
				}
			}
		}
	}
	if len(dumps) == 0 {
		return
	}
	v := watchdog.Analyze(dumps)
	if len(v.Summary) == 0 {
		return
	}
	var b strings.Builder
	if nodes > 1 {
		fmt.Fprintf(&b, "Flight recorder, job-wide (%d nodes; this node's dumps: %s):\n", nodes, dir)
	} else {
		fmt.Fprintf(&b, "Flight recorder (gorun trace %s):\n", dir)
	}
	for _, l := range v.Summary {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	fmt.Fprint(cfg.Stderr, b.String())
}
