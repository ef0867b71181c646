package cmdline

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gorun-dev/gorun/internal/cmdline/flagval"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/cmdline/scheduler"
	"github.com/gorun-dev/gorun/launcher"
)

// applyScheduler gives the launch flags the user did not give the values
// a cluster scheduler's environment holds (--scheduler, default auto:
// Slurm, else Kubernetes), and returns them all, applied or not, for
// --dry-run, with the line to log about them (logNote). --standalone is a single-node job of its own: no scheduler
// values apply. With --nproc-per-node=gpu or auto, the scheduler's count
// of this node's GPUs is the answer.
func applyScheduler(c *cli.Context) (name string, flags []launcher.SchedulerFlag, storeHosts []string, logNote func(*logrus.Logger), err error) {
	logNote = func(*logrus.Logger) {}
	if c.Bool(fStandalone) {
		return "", nil, nil, logNote, nil
	}
	det, err := scheduler.Detect(c.String(fScheduler), os.Getenv, c.IsSet)
	if err != nil {
		return "", nil, nil, logNote, fmt.Errorf("%w (--scheduler=none ignores the scheduler's environment)", err)
	}
	var applied []string
	for _, st := range det.Flags {
		s := st
		s.Overridden = c.IsSet(st.Flag)
		if !s.Overridden {
			if err := c.Set(st.Flag, st.Value); err != nil {
				return "", nil, nil, logNote, fmt.Errorf("--%s=%s from %s: %w", st.Flag, st.Value, st.Source, err)
			}
			applied = append(applied, "--"+st.Flag+"="+st.Value)
		}
		flags = append(flags, s)
	}
	if n := det.GPUsOnNode; n > 0 {
		if v := c.String(fNprocPerNode); v == "gpu" || v == "auto" {
			if err := c.Set(fNprocPerNode, strconv.Itoa(n)); err != nil {
				return "", nil, nil, logNote, err
			}
			flags = append(flags, launcher.SchedulerFlag{Flag: fNprocPerNode, Value: strconv.Itoa(n), Source: det.GPUsSource + " (for --nproc-per-node=" + v + ")"})
			applied = append(applied, "--"+fNprocPerNode+"="+strconv.Itoa(n))
		}
	}
	// Slurm's way to warn a job before its end is SIGUSR1 (scancel
	// --signal=USR1, sbatch --signal=USR1@T), sent to every process of
	// the step: a stop request, like its SIGTERM.
	if det.Scheduler == scheduler.Slurm {
		st := launcher.SchedulerFlag{Flag: fPreemptSignal, Value: "SIGTERM,SIGUSR1", Source: "Slurm: scancel --signal=USR1 and sbatch --signal=USR1@T warn a job before its end", Overridden: c.IsSet(fPreemptSignal)}
		if !st.Overridden {
			if err := c.Set(fPreemptSignal, st.Value); err != nil {
				return "", nil, nil, logNote, err
			}
			applied = append(applied, "--"+fPreemptSignal+"="+st.Value)
		}
		flags = append(flags, st)
	}
	// The store's members on the first three hosts, where the store is
	// the one the scheduler's values chose (the embedded one at the first
	// host) and the user names no members.
	if len(det.StoreHosts) > 0 {
		conf, _ := flagval.ParseKeyValues(fRdzvConf, c.String(fRdzvConf))
		ep, fromScheduler := det.Value(fRdzvEndpoint)
		st := launcher.SchedulerFlag{Flag: fRdzvConf, Value: "store_hosts=" + strings.Join(det.StoreHosts, "+"), Source: det.StoreSource}
		st.Overridden = conf["store_hosts"] != "" || !fromScheduler || c.String(fRdzvEndpoint) != ep || c.String(fRdzvBackend) == "static"
		if !st.Overridden {
			storeHosts = det.StoreHosts
			applied = append(applied, "--rdzv-conf "+st.Value)
		}
		flags = append(flags, st)
	}
	// scancel and a time limit send SIGTERM to the workers themselves:
	// a worker that waits for another signal dies of it before it saves.
	var warn string
	if det.Scheduler == scheduler.Slurm {
		if ws := c.String(fPreemptWorkerSig); ws != "" && !strings.EqualFold(strings.TrimPrefix(strings.ToUpper(ws), "SIG"), "TERM") {
			warn = fmt.Sprintf("--%s=%s under Slurm: scancel and the time limit send SIGTERM to the workers themselves, which ends workers that do not take SIGTERM as the stop request before they save; keep the default (TERM) under Slurm", fPreemptWorkerSig, ws)
		}
	}
	if len(applied) > 0 || warn != "" {
		logNote = func(log *logrus.Logger) {
			if len(applied) > 0 {
				log.Infof("%s: %s (from the environment; --dry-run shows where each came from)", det.Scheduler, strings.Join(applied, " "))
			}
			if warn != "" {
				log.Warn(warn)
			}
		}
	}
	return det.Scheduler, flags, storeHosts, logNote, nil
}
