package launcher

import (
	"strconv"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/proc"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher/probe"
	"github.com/gorun-dev/gorun/watchdog"
)

// forward passes a signal that does not stop the job (SIGUSR1, SIGUSR2)
// to the workers that handle it, and only those: its default action
// would end the others (a PyTorch script that never heard of it). On
// SIGUSR1, gorun's dump signal (docs/watchdog.md), the workers' probes
// also write their stacks and flight recorders, and the job goes on.
func (att *attempt) forward(sig syscall.Signal) {
	cfg := att.cfg
	if sig == syscall.SIGUSR1 && cfg.probes() && len(att.workers) > 0 {
		if req := envOf(att.workers[0].spec, workerenv.ProbeRequest); req != "" {
			id := watchdog.LiveSnapshotID + strconv.FormatInt(time.Now().UnixNano(), 10)
			if err := probe.Request(req, id); err != nil {
				cfg.Log.Warnf("SIGUSR1: %v", err)
			} else {
				cfg.Log.Warnf("SIGUSR1: the workers' probes write their stacks and flight recorders to %s (gorun trace reads them); the job goes on", envOf(att.workers[0].spec, workerenv.FlightRecorderDir))
			}
		}
	}
	for _, w := range att.running() {
		catches, err := proc.Catches(w.proc.Pid, sig)
		if err != nil || !catches {
			cfg.Log.Infof("%s not passed to local rank %d (pid %d): it has no handler for it, and would end", SignalName(sig), w.spec.LocalRank, w.proc.Pid)
			continue
		}
		if err := w.proc.signalGroup(sig); err != nil {
			cfg.Log.Warnf("local rank %d: %v", w.spec.LocalRank, err)
		}
	}
}
