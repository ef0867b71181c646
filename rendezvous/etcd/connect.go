package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// connect opens the rendezvous, retrying while etcd cannot be reached
// (the node hosting the embedded store may start later) for up to
// cfg.UnreachableTimeout. The first failure is reported at once, with
// what a probe of each endpoint found.
func connect(ctx context.Context, ccfg clientv3.Config, cfg Config, jobStore, waitingForHost bool, log logrus.FieldLogger) (_ *clientv3.Client, _ *Rendezvous, err error) {
	endpoints := strings.Join(ccfg.Endpoints, ",")
	start := time.Now()
	delay := 100 * time.Millisecond
	var lastReport time.Time
	var cli *clientv3.Client
	defer func() {
		if err != nil && cli != nil {
			cli.Close()
		}
	}()
	for {
		if cli == nil {
			// A client that logs in fails at once while etcd is away.
			dctx, cancel := context.WithTimeout(ctx, dialTimeout)
			cli, err = NewClient(dctx, ccfg, cfg.Token)
			cancel()
		}
		if cli != nil {
			actx, cancel := context.WithTimeout(ctx, dialTimeout)
			var r *Rendezvous
			r, err = New(actx, cli, cfg)
			cancel()
			if err == nil {
				return cli, r, nil
			}
		}
		if ctx.Err() != nil || isPermanent(err) {
			return nil, nil, err
		}
		diag := jobauth.Diagnose(ctx, ccfg.Endpoints, ccfg.TLS, jobStore)
		if diag.Permanent && !jobStore && cfg.Token != nil && ccfg.TLS == nil && ccfg.Username == "" {
			// An etcd endpoint that speaks TLS may be a `gorun store` of
			// this job that was not up, or too busy, when this node first
			// asked: it is one if it proves the token now.
			if jobTLS, terr := jobauth.ClientTLS(cfg.Token); terr == nil {
				if proven, _ := jobauth.ProveJobStore(ctx, ccfg.Endpoints, jobTLS); proven {
					ccfg.TLS, ccfg.Username, ccfg.Password, jobStore = jobTLS, EtcdUser, cfg.Token.EtcdPassword(), true
					cfg.Presence = true
					if cli != nil {
						cli.Close()
						cli = nil
					}
					continue
				}
			}
			diag.Permanent = false // retried within connect_timeout
		}
		if diag.Permanent && diag.Cause != nil {
			return nil, nil, fmt.Errorf("%w at %w", diag.Cause, diag.Why)
		}
		if diag.Permanent {
			return nil, nil, fmt.Errorf("%w: etcd at %s: %w", ErrUnreachable, endpoints, diag.Why)
		}
		hint := ""
		if waitingForHost {
			hint = "; the node hosting the embedded store may not have started yet"
		}
		if gone := time.Since(start); gone >= cfg.UnreachableTimeout {
			return nil, nil, setting.Errorf("%w: never reached etcd at %s in %v (%s): %w%s", ErrUnreachable, endpoints, gone.Round(time.Second), setting.Name("Conf.connect_timeout"), diag.Why, hint)
		}
		if time.Since(lastReport) > DefaultWaitNoteInterval {
			log.Warnf("etcd at %s unreachable: %s%s; retrying for up to %v", endpoints, cfg.shown(diag.Why), hint, (cfg.UnreachableTimeout - time.Since(start)).Round(time.Second))
			lastReport = time.Now()
		}
		if err := ctxtime.Sleep(ctx, delay); err != nil {
			return nil, nil, err
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// NewClient is a client of the store of ccfg. A client of the job's own
// store (its user, with the password the job token gives) logs in once
// and presents the signed token it got from then on (jobauth.SignIn),
// instead of logging in again at each stream it opens; any other client
// logs in as ccfg says.
func NewClient(ctx context.Context, ccfg clientv3.Config, token Token) (*clientv3.Client, error) {
	if token == nil || ccfg.Username != EtcdUser || ccfg.Password != token.EtcdPassword() {
		return clientv3.New(ccfg)
	}
	signed, err := jobauth.SignIn(ctx, ccfg)
	if err != nil {
		return nil, err
	}
	if signed == "" {
		return clientv3.New(ccfg) // the store's tokens are not signed ones
	}
	ccfg.Username, ccfg.Password, ccfg.Token = "", "", signed
	return clientv3.New(ccfg)
}

// shown is err as this node's user reads it: with the settings named as
// the user knows them (ShowSetting), as in a log line.
func (cfg Config) shown(err error) string {
	if cfg.ShowSetting == nil {
		return err.Error()
	}
	return setting.Message(err, cfg.ShowSetting)
}

// isPermanent tells errors that retrying cannot fix.
func isPermanent(err error) bool {
	return errors.Is(err, rendezvous.ErrShapeMismatch) || errors.Is(err, rendezvous.ErrInvalidConfig) ||
		errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrPermissionDenied) ||
		errors.Is(err, rpctypes.ErrAuthNotEnabled) || errors.Is(err, rpctypes.ErrInvalidAuthToken)
}

// portTaken reports whether endpoint (an address of this host) is bound
// by another process already.
func portTaken(endpoint string) bool {
	ln, err := net.Listen("tcp", endpoint)
	if err != nil {
		return errors.Is(err, syscall.EADDRINUSE)
	}
	ln.Close()
	return false
}

// isLocal reports whether endpoint's host is this node
// (jobstore.SameHost): --local-addr when given, else the host's name or
// one of its addresses; names and addresses that resolve alike match.
func isLocal(ctx context.Context, endpoint, localAddr string) bool {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return false
	}
	return jobstore.SameHost(ctx, host, localAddr)
}

// isThisHost says whether host names this machine: one of its addresses,
// loopback, the unspecified address, or its name (isLocal).
func isThisHost(ctx context.Context, host, localAddr string) bool {
	if ip := net.ParseIP(host); ip != nil && (ip.IsLoopback() || ip.IsUnspecified()) {
		return true
	}
	return jobstore.SameHost(ctx, host, localAddr)
}
