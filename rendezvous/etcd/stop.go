package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
)

// maxGrace bounds a stop request's grace period.
const maxGrace = 24 * time.Hour

// parseStop reads a stop request's record, range-checked.
func parseStop(payload []byte) (rendezvous.StopRequest, error) {
	var req rendezvous.StopRequest
	if err := decodeRecord(payload, kindStop, &req); err != nil {
		return req, err
	}
	return checkStop(req)
}

// checkStop range-checks a stop request and clips its reason.
func checkStop(req rendezvous.StopRequest) (rendezvous.StopRequest, error) {
	if req.Grace < 0 || req.Grace > maxGrace {
		return req, fmt.Errorf("stop request grace %v: want 0 to %v", req.Grace, maxGrace)
	}
	req.Reason = clip(req.Reason)
	return req, nil
}

// RequestStop records a job-wide stop request (a preemption); every
// node's WatchStop delivers it. The first request stands: a later one
// changes nothing. The request is kept without a lease: it outlives the
// node that made it.
func (r *Rendezvous) RequestStop(ctx context.Context, req rendezvous.StopRequest) error {
	return requestStop(ctx, r.cli, r.k, r.g, req)
}

func requestStop(ctx context.Context, cli *clientv3.Client, k keys, g *jobauth.Guard, req rendezvous.StopRequest) error {
	if req.Grace < 0 || req.Grace > maxGrace {
		return fmt.Errorf("%w: stop grace %v: want 0 to %v", rendezvous.ErrInvalidConfig, req.Grace, maxGrace)
	}
	req.Reason = clip(req.Reason)
	key := k.stop()
	put := clientv3.OpPut(key, g.Seal(key, encodeRecord(kindStop, req)))
	// A stranger's value must not block the job's request: it is replaced
	// (unless it changed meanwhile), and tried again while strangers keep
	// writing, until ctx ends. Only a recorded request is a success.
	for {
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(put).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fmt.Errorf("rendezvous: record the stop request: %w", err)
		}
		if resp.Succeeded {
			return nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // removed meanwhile
		}
		if payload, ok := g.Open(key, kvs[0].Value, kvs[0].ModRevision); ok {
			// The job's own request stands, if this release can read it:
			// one of another release's is a request no node of this one
			// sees.
			if _, err := parseStop(payload); err != nil {
				return fmt.Errorf("%w: the job's stop request at %s cannot be read by this gorun: %w", rendezvous.ErrShapeMismatch, key, err)
			}
			return nil
		}
		resp, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)).Then(put).Commit()
		if err != nil {
			return fmt.Errorf("rendezvous: record the stop request: %w", err)
		}
		if resp.Succeeded {
			return nil
		}
		if err := ctxtime.Sleep(ctx, rewatchDelay); err != nil {
			return fmt.Errorf("rendezvous: record the stop request: someone else keeps writing %s: %w", key, err)
		}
	}
}

// WatchStop delivers the job's stop request, once, as soon as one is
// recorded (at once if one already is); the channel closes when ctx ends.
// A broken watch is set up again; an unreachable etcd only delays the
// news.
func (r *Rendezvous) WatchStop(ctx context.Context) <-chan rendezvous.StopRequest {
	out := make(chan rendezvous.StopRequest, 1)
	go func() {
		defer close(out)
		delay := rewatchDelay
		for ctx.Err() == nil {
			req, err := r.watchStop(ctx)
			if err == nil {
				out <- req
				return
			}
			r.cfg.Log.Debugf("rendezvous %s: watch for a stop request: %v; watching again", r.cfg.Shape.RunID, err)
			if ctxtime.Sleep(ctx, delay) != nil {
				return
			}
			delay = min(2*delay, 5*time.Second)
		}
	}()
	return out
}

// watchStop waits for the stop request under ctx.
func (r *Rendezvous) watchStop(ctx context.Context) (rendezvous.StopRequest, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	key := r.k.stop()
	w := r.cli.Watch(clientv3.WithRequireLeader(wctx), key)
	gctx, gcancel := context.WithTimeout(ctx, callTimeout)
	resp, err := r.cli.Get(gctx, key)
	gcancel()
	if err != nil {
		return rendezvous.StopRequest{}, err
	}
	if len(resp.Kvs) > 0 {
		if req, ok := r.openStop(resp.Kvs[0].Value, resp.Kvs[0].ModRevision); ok {
			return req, nil
		}
	}
	for {
		select {
		case wr, ok := <-w:
			if !ok || wr.Err() != nil {
				return rendezvous.StopRequest{}, watchErr(wr, ok)
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				if req, ok := r.openStop(ev.Kv.Value, ev.Kv.ModRevision); ok {
					return req, nil
				}
			}
		case <-ctx.Done():
			return rendezvous.StopRequest{}, ctx.Err()
		}
	}
}

// openStop opens a stop request's sealed value; a stranger's is refused
// (and left for the control keys' mending to remove).
func (r *Rendezvous) openStop(value []byte, rev int64) (rendezvous.StopRequest, bool) {
	key := r.k.stop()
	payload, ok := r.g.Open(key, value, rev)
	if !ok {
		return rendezvous.StopRequest{}, false
	}
	req, err := parseStop(payload)
	if err != nil {
		r.g.Refuse(key, rev, err.Error())
		return rendezvous.StopRequest{}, false
	}
	return req, true
}

// RequestStop records a stop request for job runID from outside the job
// (gorun stop): token is the job's (nil: the one kept in etcd for a job
// started without one).
func RequestStop(ctx context.Context, cli *clientv3.Client, prefix, runID string, token Token, req rendezvous.StopRequest, log logrus.FieldLogger) error {
	if err := rendezvous.ValidateRunID(runID); err != nil {
		return err
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	k := newKeys(prefix, runID)
	resp, err := cli.Get(ctx, k.shape())
	if err != nil {
		return fmt.Errorf("rendezvous: etcd at %v: %w", cli.Endpoints(), err)
	}
	if len(resp.Kvs) == 0 {
		return fmt.Errorf("%w %q in etcd at %v (prefix %s)", errNoJob, runID, cli.Endpoints(), prefix)
	}
	if token == nil {
		sec, err := cli.Get(ctx, k.token())
		if err != nil {
			return fmt.Errorf("rendezvous: etcd at %v: %w", cli.Endpoints(), err)
		}
		if len(sec.Kvs) == 0 {
			return setting.Errorf("job %q was started with a token: give the same one (%s, GORUN_RDZV_TOKEN)", runID, setting.Name("TokenFile"))
		}
		if token, err = parseStoredToken(k.token(), sec.Kvs[0].Value); err != nil {
			return err
		}
	}
	g := jobauth.NewGuard(token, log)
	if _, ok := g.Open(k.shape(), resp.Kvs[0].Value, resp.Kvs[0].ModRevision); !ok {
		// A stranger may have just rewritten the shape (the agents mend
		// it): the version before counts too.
		prev, err := cli.Get(ctx, k.shape(), clientv3.WithRev(resp.Kvs[0].ModRevision-1))
		if err != nil || len(prev.Kvs) == 0 {
			return setting.Errorf("job %q is not sealed with this token: give the job's own (%s, GORUN_RDZV_TOKEN)", runID, setting.Name("TokenFile"))
		}
		if _, ok := g.Open(k.shape(), prev.Kvs[0].Value, prev.Kvs[0].ModRevision); !ok {
			return setting.Errorf("job %q is not sealed with this token: give the job's own (%s, GORUN_RDZV_TOKEN)", runID, setting.Name("TokenFile"))
		}
	}
	if out, err := cli.Get(ctx, k.outcome()); err == nil && len(out.Kvs) > 0 {
		if v, ok := g.Open(k.outcome(), out.Kvs[0].Value, out.Kvs[0].ModRevision); ok {
			var o outcomeRecord
			if err := decodeRecord(v, kindOutcome, &o); err != nil {
				return fmt.Errorf("%w: job %q is over (its outcome: %v)", errJobOver, runID, err)
			}
			return fmt.Errorf("%w: job %q is over (%s)", errJobOver, runID, o)
		}
	}
	return requestStop(ctx, cli, k, g, req)
}

// errJobOver: the job already has its outcome.
var errJobOver = errors.New("nothing to stop")

// errNoJob: the store holds no job of that id.
var errNoJob = errors.New("no job")
