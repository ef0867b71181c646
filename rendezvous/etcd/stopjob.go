package etcd

import (
	"context"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
)

// StopToken is the token of the running job runID, whose store is at
// endpoint, for a request to it (gorun stop): --rdzv-conf token_file,
// else GORUN_RDZV_TOKEN, else, for an embedded store, the one its nodes
// share through the home folder. An external etcd's job without either
// has none (nil). Its errors are bad input.
func (c Conf) StopToken(ctx context.Context, runID, endpoint string, embedded bool, log logrus.FieldLogger) (Token, error) {
	if t, given, err := c.token.Read(ctx, false, 0, log); given {
		return t, err
	}
	if embedded {
		t, err := jobauth.ReadSharedToken(runID, endpoint)
		if err != nil {
			return nil, rendezvous.BadInput(setting.Errorf("the embedded store needs the job's token: %s=PATH, or GORUN_RDZV_TOKEN (no token file of job %s in your home folder: %v; a Slurm step started with its own %s or %s needs them given: gorun stop %s=HOST:PORT RUN_ID)", setting.Name("Conf.token_file"), runID, err, setting.Name("RunID"), setting.Name("Endpoint"), setting.Name("Endpoint")))
		}
		return t, nil
	}
	return nil, nil
}

// DialJob is an etcd client of the store at endpoints of the job runID
// whose token is token (StopToken), for a one-off request: a job's store
// proves it holds the token before this client sends the password
// derived from it. ctx bounds the client's life.
func (c Conf) DialJob(ctx context.Context, token Token, runID string, endpoints []string, embedded bool) (*clientv3.Client, error) {
	tlsCfg, jobStore, err := c.storeTLS(ctx, token, endpoints, embedded)
	if err != nil {
		return nil, rendezvous.BadInput(err)
	}
	if jobStore && c.user == "" {
		if proven, err := jobauth.ProveJobStore(ctx, endpoints, tlsCfg); !proven && err != nil {
			return nil, fmt.Errorf("the store at %s and this token do not match: the token is not job %s's, or the store is not its (%v)", strings.Join(endpoints, ","), runID, err)
		}
		c.user, c.password = EtcdUser, token.EtcdPassword()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: dialTimeout, TLS: tlsCfg,
		Username: c.user, Password: c.password, Logger: zap.NewNop(), Context: ctx})
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %v", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

// Prefix is the job's key prefix (--rdzv-conf etcd_prefix).
func (c Conf) Prefix() string { return c.prefix }
