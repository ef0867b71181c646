package etcd

import (
	"context"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/rendezvous"
)

// hangPrefix holds the nodes' flight-recorder reports of round r.
func (k keys) hangPrefix(r int) string { return k.root + "hang/" + strconv.Itoa(r) + "/" }

// hangReportTTL keeps a report for the nodes that read it after its
// writer left (a node's own lease ends with it), then lets it go.
const hangReportTTL = 5 * 60 // seconds

// ShareHangReport puts this node's report on a failed round (its
// workers' trimmed flight-recorder dumps) and returns the reports of
// every node of the round, this one's included, as they arrive within
// wait: all of them, or those in by then. A report outlives its node for
// hangReportTTL, on a lease of its own.
func (r *Rendezvous) ShareHangReport(ctx context.Context, round rendezvous.Round, report []byte, wait time.Duration) ([][]byte, error) {
	prefix := r.k.hangPrefix(round.Number)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	grant, err := r.cli.Grant(wctx, hangReportTTL)
	if err != nil {
		return nil, err
	}
	key := prefix + strconv.Itoa(round.GroupRank)
	put, err := r.cli.Put(wctx, key, r.g.seal(key, string(report)), clientv3.WithLease(grant.ID))
	if err != nil {
		return nil, err
	}
	watch := r.cli.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(put.Header.Revision+1))
	for {
		// Read under a context of its own: once wait is over, one last
		// read returns what came in. Bounded: a linearizable read at a
		// member that cannot reach the others' consensus waits forever
		// (found by the chaos suite, after a SIGSTOP of this agent).
		rctx, rcancel := context.WithTimeout(ctx, callTimeout)
		resp, err := r.cli.Get(rctx, prefix, clientv3.WithPrefix())
		rcancel()
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) >= round.GroupWorldSize || wctx.Err() != nil {
			out := make([][]byte, 0, len(resp.Kvs))
			for _, kv := range resp.Kvs {
				if v, ok := r.g.openLarge(string(kv.Key), kv.Value, kv.ModRevision); ok {
					out = append(out, v)
				}
			}
			return out, nil
		}
		select {
		case <-watch:
		case <-wctx.Done():
		}
	}
}
