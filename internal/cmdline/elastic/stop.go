package elastic

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/internal/cmdline"
	"github.com/gorun-dev/gorun/launcher"
	"github.com/gorun-dev/gorun/rendezvous"
	etcdrdzv "github.com/gorun-dev/gorun/rendezvous/etcd"
)

// stopTimeout bounds gorun stop's calls to etcd.
const stopTimeout = 10 * time.Second

// StopCommand is `gorun stop RUN_ID`: a job-wide stop request (a
// preemption) recorded in the job's store.
func (e *Elastic) StopCommand() *cli.Command {
	return &cli.Command{
		Name:      "stop",
		Usage:     "ask a running multi-node job to stop cleanly: every node's workers save at the same step and exit 0, gorun exits 75",
		ArgsUsage: "RUN_ID",
		UsageText: "gorun stop --rdzv-endpoint=node0:29400 --rdzv-conf token_file=/shared/job.token job42\n" +
			"gorun stop --rdzv-backend=etcd --rdzv-endpoint=etcd1:2379 job42",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "rdzv-backend", Aliases: []string{"rdzv_backend"}, Value: "embedded", Usage: "the job's backend: embedded, c10d or etcd (the port's default: 29400 or 2379)"},
			&cli.StringFlag{Name: "rdzv-endpoint", Aliases: []string{"rdzv_endpoint"}, Usage: "the job's store, host[:port][,host[:port]...]", Required: true},
			&cli.StringFlag{Name: "rdzv-conf", Aliases: []string{"rdzv_conf"}, Usage: "the job's --rdzv-conf: token_file, user, password, cacert, cert, key, etcd_prefix"},
			&cli.StringFlag{Name: "grace", Usage: "how long the workers have to stop (default: each node's --preempt-grace)"},
			&cli.StringFlag{Name: "reason", Value: "gorun stop", Usage: "why, for the job's logs"},
		},
		Action: stopAction,
	}
}

func stopAction(c *cli.Context) error {
	log := logrus.New()
	log.SetOutput(c.App.ErrWriter)
	if c.NArg() != 1 {
		return cli.Exit("gorun stop: give the job's run id (its --rdzv-id), once", 2)
	}
	runID := c.Args().First()
	if err := rendezvous.ValidateRunID(runID); err != nil {
		return cli.Exit(err.Error(), 2)
	}
	req := rendezvous.StopRequest{Reason: c.String("reason")}
	if v := c.String("grace"); v != "" {
		g, err := cmdline.ParseSeconds("grace", v)
		if err != nil || g <= 0 || g > 24*time.Hour {
			return cli.Exit(fmt.Sprintf("--grace=%q: want a duration above 0 and at most 24h, such as 60s", v), 2)
		}
		req.Grace = g
	}
	kv, err := launcher.ParseKeyValues("rdzv-conf", c.String("rdzv-conf"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	conf, err := parseConf(kv, log)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	embedded := isEmbedded(c.String("rdzv-backend"))
	endpoints, err := parseEndpoints(c.String("rdzv-endpoint"), embedded)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	ctx, cancel := context.WithTimeout(c.Context, stopTimeout)
	defer cancel()
	var token etcdrdzv.Token
	switch {
	case conf.tokenFile != "":
		if token, err = tokenFromFile(ctx, conf.tokenFile, false, 0, log); err != nil {
			return cli.Exit(err.Error(), 2)
		}
	case conf.token != "":
		if token, err = etcdrdzv.ParseToken(tokenEnv, []byte(conf.token)); err != nil {
			return cli.Exit(err.Error(), 2)
		}
	case embedded:
		return cli.Exit("gorun stop: the embedded store needs the job's token: --rdzv-conf token_file=PATH, or GORUN_RDZV_TOKEN", 2)
	}
	if embedded && conf.user == "" {
		conf.user, conf.password = etcdrdzv.EtcdUser, token.EtcdPassword()
	}
	tlsCfg, err := conf.clientTLS()
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	cli3, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: dialTimeout, TLS: tlsCfg,
		Username: conf.user, Password: conf.password, Logger: zap.NewNop(), Context: ctx})
	if err != nil {
		return cli.Exit(fmt.Sprintf("gorun stop: etcd at %s: %v", strings.Join(endpoints, ","), err), 1)
	}
	defer cli3.Close()
	if err := etcdrdzv.RequestStop(ctx, cli3, conf.prefix, runID, token, req, log); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return cli.Exit(fmt.Sprintf("gorun stop: no store answered at %s within %v (is the job running, and is this its --rdzv-endpoint? a single-node job has no store: send its gorun SIGTERM): %v", strings.Join(endpoints, ","), stopTimeout, err), 1)
		}
		return cli.Exit(err.Error(), 1)
	}
	grace := "each node's --preempt-grace"
	if req.Grace > 0 {
		grace = req.Grace.String()
	}
	fmt.Fprintf(c.App.Writer, "stop requested for job %s: its workers save and exit within %s; the agents then exit %d\n", runID, grace, launcher.ExitPreempted)
	return nil
}
