package companion

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/gorun-dev/gorun/internal/cmdline/flagval"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/gorun-dev/gorun/internal/cmdline"
	"github.com/gorun-dev/gorun/internal/cmdline/scheduler"
	"github.com/gorun-dev/gorun/launcher"
	"github.com/gorun-dev/gorun/rendezvous"
	etcdrdzv "github.com/gorun-dev/gorun/rendezvous/etcd"
)

// stopTimeout bounds gorun stop's calls to etcd.
const stopTimeout = 10 * time.Second

// StopCommand is `gorun stop RUN_ID`: a job-wide stop request (a
// preemption) recorded in the job's store.
func (e *Commands) StopCommand() *cli.Command {
	return &cli.Command{
		Name:      "stop",
		Usage:     "ask a running multi-node job to stop cleanly: every node's workers save at the same step and exit 0, gorun exits 75",
		ArgsUsage: "RUN_ID",
		UsageText: "gorun stop --rdzv-endpoint=node0:29400 --rdzv-conf token_file=/shared/job.token job42\n" +
			"gorun stop --rdzv-backend=etcd --rdzv-endpoint=etcd1:2379 job42\n" +
			"gorun stop          (inside a Slurm allocation: every gorun step of the job; or give JOB.STEP)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "rdzv-backend", Aliases: []string{"rdzv_backend"}, Value: "embedded", Usage: "the job's backend: embedded, c10d or etcd (the port's default: 29400 or 2379)"},
			&cli.StringFlag{Name: "rdzv-endpoint", Aliases: []string{"rdzv_endpoint"}, Usage: "the job's store, host[:port][,host[:port]...] (inside a Slurm allocation: found from the job's steps)"},
			&cli.StringFlag{Name: "rdzv-conf", Aliases: []string{"rdzv_conf"}, Usage: "the job's --rdzv-conf: token_file, user, password, cacert, cert, key, etcd_prefix"},
			&cli.StringFlag{Name: "grace", Usage: "how long the workers have to stop (default: each node's --preempt-grace)"},
			&cli.StringFlag{Name: "reason", Value: "gorun stop", Usage: "why, for the job's logs"},
		},
		Action: stopAction,
	}
}

// stopTarget is one job to ask: its run id and store (no store: a Slurm
// step of one node, signalled through Slurm instead).
type stopTarget struct {
	runID     string
	endpoints []string
}

func stopAction(c *cli.Context) error {
	log := logrus.New()
	log.SetOutput(c.App.ErrWriter)
	if c.NArg() > 1 {
		return cmdline.Usagef("gorun stop: give the job's run id (its --rdzv-id), once")
	}
	runID := c.Args().First()
	if runID != "" {
		if err := rendezvous.ValidateRunID(runID); err != nil {
			return cmdline.Usage(err)
		}
	}
	req := rendezvous.StopRequest{Reason: c.String("reason")}
	if v := c.String("grace"); v != "" {
		g, err := rendezvous.ParseSeconds(v)
		if err != nil || g <= 0 || g > 24*time.Hour {
			return cmdline.Usagef("--grace=%q: want a duration above 0 and at most 24h, such as 60s", v)
		}
		req.Grace = g
	}
	kv, err := flagval.ParseKeyValues("rdzv-conf", c.String("rdzv-conf"))
	if err != nil {
		return cmdline.Usage(err)
	}
	conf, err := etcdrdzv.ParseConf(kv, log)
	if err != nil {
		return cmdline.Usage(err)
	}
	embedded := etcdrdzv.IsEmbedded(c.String("rdzv-backend"))
	var targets []stopTarget
	switch job, step := scheduler.SlurmJobStep(os.Getenv); {
	case c.IsSet("rdzv-endpoint"):
		if runID == "" {
			return cmdline.Usagef("gorun stop: give the job's run id (its --rdzv-id)")
		}
		endpoints, err := etcdrdzv.ParseEndpoints(c.String("rdzv-endpoint"), embedded)
		if err != nil {
			return cmdline.Usage(err)
		}
		targets = []stopTarget{{runID, endpoints}}
	case job != "" && embedded:
		if targets, err = slurmStopTargets(c.Context, job, step, runID, c.App.ErrWriter); err != nil {
			return cli.Exit("gorun stop: "+err.Error(), 1)
		}
	default:
		return cmdline.Usagef("gorun stop: give the job's store (--rdzv-endpoint=HOST:PORT) and run id; inside a Slurm allocation gorun finds both")
	}
	code := 0
	for _, t := range targets {
		err := stopOne(c, log, conf, embedded, t, req)
		if err == nil {
			continue
		}
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			code = max(code, ec.ExitCode())
		} else {
			code = max(code, 1)
		}
		fmt.Fprintln(c.App.ErrWriter, err)
	}
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

// slurmStopTargets are the running gorun steps of Slurm job job, found
// with squeue: the one whose run id is runID, else every step named after
// gorun (srun names a step after its program) but step, gorun stop's own
// ("" outside a step); the others are named on skipped, not signalled.
func slurmStopTargets(ctx context.Context, job, step, runID string, skipped io.Writer) ([]stopTarget, error) {
	self := ""
	if step != "" {
		self = job + "." + step
	}
	steps, err := scheduler.RunningSlurmSteps(ctx, job, self)
	if err != nil {
		return nil, err
	}
	var targets []stopTarget
	for _, s := range steps {
		switch {
		case runID != "" && s.RunID != runID:
		case runID == "" && !s.IsGorun():
			fmt.Fprintf(skipped, "gorun stop: step %s (%s) does not run gorun: left alone (give its run id to stop it anyway)\n", s.RunID, s.Name)
		default:
			targets = append(targets, stopTarget{s.RunID, s.Endpoints})
		}
	}
	if len(targets) == 0 {
		if runID != "" {
			return nil, fmt.Errorf("the Slurm job %s has no running step %s (squeue --steps --jobs=%s)", job, runID, job)
		}
		return nil, fmt.Errorf("the Slurm job %s has no running gorun step to stop (start gorun with srun)", job)
	}
	return targets, nil
}

// stopOne asks one job to stop: through its store, or, for a Slurm step
// of one node (no store), with Slurm's SIGUSR1 to the step, which its
// gorun takes as a stop request.
func stopOne(c *cli.Context, log *logrus.Logger, conf etcdrdzv.Conf, embedded bool, t stopTarget, req rendezvous.StopRequest) error {
	ctx, cancel := context.WithTimeout(c.Context, stopTimeout)
	defer cancel()
	if len(t.endpoints) == 0 {
		out, err := exec.CommandContext(ctx, "scancel", "--signal=USR1", t.runID).CombinedOutput()
		if err != nil {
			return fmt.Errorf("gorun stop: scancel --signal=USR1 %s: %v: %s", t.runID, err, strings.TrimSpace(string(out)))
		}
		fmt.Fprintf(c.App.Writer, "stop requested for step %s (one node: SIGUSR1 through Slurm); its gorun exits %d once its workers saved\n", t.runID, launcher.ExitPreempted)
		return nil
	}
	token, err := conf.StopToken(ctx, t.runID, t.endpoints[0], embedded, log)
	if err != nil {
		return cmdline.ExitError(fmt.Errorf("gorun stop: %w", err), 1)
	}
	cli3, err := conf.DialJob(ctx, token, t.runID, t.endpoints, embedded)
	if err != nil {
		return cmdline.ExitError(fmt.Errorf("gorun stop: %w", err), 1)
	}
	defer cli3.Close()
	if err := etcdrdzv.RequestStop(ctx, cli3, conf.Prefix(), t.runID, token, req, log); err != nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("gorun stop: no store answered at %s within %v (is the job running, and is this its --rdzv-endpoint? a single-node job has no store: send its gorun SIGTERM): %v", strings.Join(t.endpoints, ","), stopTimeout, err)
		case errors.Is(err, rpctypes.ErrAuthFailed):
			return fmt.Errorf("gorun stop: the store at %s refuses this token: it is not job %s's (%v)", strings.Join(t.endpoints, ","), t.runID, err)
		}
		return err
	}
	grace := "each node's --preempt-grace"
	if req.Grace > 0 {
		grace = req.Grace.String()
	}
	fmt.Fprintf(c.App.Writer, "stop requested for job %s: its workers save and exit within %s; the agents then exit %d\n", t.runID, grace, launcher.ExitPreempted)
	return nil
}
