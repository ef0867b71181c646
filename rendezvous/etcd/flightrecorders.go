package etcd

import (
	"context"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/rendezvous"
)

// flightRecorderPrefix holds the nodes' flight-recorder reports of round r.
func (k keys) flightRecorderPrefix(r int) string {
	return k.root + "flightrecorders/" + strconv.Itoa(r) + "/"
}

// flightRecorderTTL keeps a report for the nodes that read it after its
// writer left (a node's own lease ends with it), then lets it go.
const flightRecorderTTL = 5 * 60 // seconds

// ShareFlightRecorders puts this node's report on a failed round (its
// workers' trimmed flight-recorder dumps) and returns the reports of
// every node of the round, this one's included, as they arrive within
// wait: all of them, or those in by then. A node whose lease ended (a lost
// node: it never reports) is not waited for; it used to cost every
// survivor the whole wait (10 s) after a node loss. A report outlives its
// node for flightRecorderTTL, on a lease of its own.
func (r *Rendezvous) ShareFlightRecorders(ctx context.Context, round rendezvous.Round, report []byte, wait time.Duration) ([][]byte, error) {
	return r.shareReports(ctx, round, r.k.flightRecorderPrefix(round.Number), kindFlightRecorders, report, wait)
}

// shareReports puts this node's report under prefix (its group rank the
// key) and returns every node's of the round as they arrive within wait:
// all of them, or those in by then; a node whose lease ended is not
// waited for (see ShareFlightRecorders).
func (r *Rendezvous) shareReports(ctx context.Context, round rendezvous.Round, prefix string, kind recordKind, report []byte, wait time.Duration) ([][]byte, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	grant, err := r.cli.Grant(wctx, flightRecorderTTL)
	if err != nil {
		return nil, err
	}
	key := prefix + strconv.Itoa(round.GroupRank)
	put, err := r.cli.Put(wctx, key, r.seal(key, kind, report), clientv3.WithLease(grant.ID))
	if err != nil {
		return nil, err
	}
	watch := r.cli.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(put.Header.Revision+1))
	// The round's members still alive, and the end of their leases.
	want := round.GroupWorldSize
	var gone clientv3.WatchChan
	var alive map[string]bool
	if r.lastRound == round.Number {
		var rev int64
		if alive, rev, err = r.aliveMembers(wctx, r.lastRec); err == nil {
			want = min(want, len(alive))
			gone = r.cli.Watch(clientv3.WithRequireLeader(wctx), r.k.joinPrefix(round.Number), clientv3.WithPrefix(),
				clientv3.WithRev(rev+1), clientv3.WithFilterPut())
		}
	}
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
		if len(resp.Kvs) >= want || wctx.Err() != nil {
			out := make([][]byte, 0, len(resp.Kvs))
			for _, kv := range resp.Kvs {
				var v []byte
				if r.readLarge(string(kv.Key), kv.Value, kv.ModRevision, kind, &v) {
					out = append(out, v)
				}
			}
			return out, nil
		}
		select {
		case <-watch:
		case wr, ok := <-gone:
			switch {
			case !ok || wr.Err() != nil:
				gone = nil // no longer known: wait for every node, or the wait's end
				want = round.GroupWorldSize
			default:
				for _, ev := range wr.Events {
					delete(alive, strings.TrimPrefix(string(ev.Kv.Key), r.k.joinPrefix(round.Number)))
				}
				want = min(round.GroupWorldSize, len(alive))
			}
		case <-wctx.Done():
		}
	}
}
