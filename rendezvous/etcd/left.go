package etcd

import (
	"context"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/rendezvous"
)

// leftPrefix holds the ranks of round r that exited 0 while the others
// ran (one key per rank), so that a node whose ranks then lose their peer
// can name the rank that left on another node.
func (k keys) leftPrefix(r int) string { return k.root + "left/" + strconv.Itoa(r) + "/" }

// RecordLeft records that a rank of this node exited 0 while the others
// ran, in round (or all of its ranks: the node's part is done), on the
// node's lease: one put, gone with the node.
func (r *Rendezvous) RecordLeft(ctx context.Context, round rendezvous.Round, left rendezvous.LeftRank) error {
	ctx, stop := r.whileStore(ctx)
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	key := r.k.leftPrefix(round.Number) + strconv.Itoa(left.Rank)
	if _, err := r.cli.Put(cctx, key, r.seal(key, kindLeft, left), clientv3.WithLease(r.lease.Load().id)); err != nil {
		return fmt.Errorf("record rank %d's exit in etcd: %w", left.Rank, err)
	}
	return nil
}

// LeftRanks returns the ranks of round recorded as having left, waiting
// up to wait for a first one when there is none yet (a node that records
// it is milliseconds behind the failure it caused elsewhere).
func (r *Rendezvous) LeftRanks(ctx context.Context, round rendezvous.Round, wait time.Duration) ([]rendezvous.LeftRank, error) {
	prefix := r.k.leftPrefix(round.Number)
	ctx, stop := r.whileStore(ctx)
	defer stop()
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var watch clientv3.WatchChan
	for {
		gctx, gcancel := context.WithTimeout(ctx, min(callTimeout, wait))
		resp, err := r.cli.Get(gctx, prefix, clientv3.WithPrefix())
		gcancel()
		if err != nil {
			return nil, err
		}
		var out []rendezvous.LeftRank
		for _, kv := range resp.Kvs {
			var l rendezvous.LeftRank
			if r.read(string(kv.Key), kv.Value, kv.ModRevision, kindLeft, &l) && strconv.Itoa(l.Rank) == string(kv.Key[len(prefix):]) {
				out = append(out, l)
			}
		}
		if len(out) > 0 || wctx.Err() != nil {
			return out, nil
		}
		if watch == nil {
			watch = r.cli.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		}
		select {
		case <-watch:
		case <-wctx.Done():
		}
	}
}
