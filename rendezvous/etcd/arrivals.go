package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/rendezvous"
)

// arrivalsPrefix holds, for the job-wide straggler watch of round r, when
// each node's ranks entered the default group's collectives (one key per
// node, on its lease).
func (k keys) arrivalsPrefix(r int) string { return k.root + "stragglers/" + strconv.Itoa(r) + "/" }

// ShareArrivals puts this node's report for the job-wide straggler watch
// of round, sealed, on its lease (it replaces the node's last one).
func (r *Rendezvous) ShareArrivals(ctx context.Context, round rendezvous.Round, report []byte) error {
	key := r.k.arrivalsPrefix(round.Number) + strconv.Itoa(round.GroupRank)
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := r.cli.Put(cctx, key, r.seal(key, kindArrivals, report), clientv3.WithLease(r.lease.Load().id)); err != nil {
		return fmt.Errorf("straggler watch: put this node's arrivals in etcd: %w", err)
	}
	return nil
}

// WatchArrivals delivers every node's reports for the straggler watch of
// round as they are put (those there already first), until ctx ends. A
// value the job did not seal is refused.
func (r *Rendezvous) WatchArrivals(ctx context.Context, round rendezvous.Round) <-chan rendezvous.NodeReport {
	out := make(chan rendezvous.NodeReport, 16)
	go func() {
		defer close(out)
		_, err := retryBrokenWatch(ctx, r.cfg.Log, fmt.Sprintf("straggler watch of round %d", round.Number), func() (struct{}, error) {
			return struct{}{}, r.watchArrivals(ctx, round, out)
		})
		if err != nil && ctx.Err() == nil {
			r.cfg.Log.Warnf("straggler watch: the other nodes' arrivals can no longer be read: %v", err)
		}
	}()
	return out
}

func (r *Rendezvous) watchArrivals(ctx context.Context, round rendezvous.Round, out chan<- rendezvous.NodeReport) error {
	prefix := r.k.arrivalsPrefix(round.Number)
	deliver := func(key string, value []byte, rev int64) error {
		n, err := strconv.Atoi(strings.TrimPrefix(key, prefix))
		if err != nil || n < 0 || n >= round.GroupWorldSize {
			return nil
		}
		var v []byte
		if !r.readLarge(key, value, rev, kindArrivals, &v) {
			return nil
		}
		select {
		case out <- rendezvous.NodeReport{GroupRank: n, Value: v}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	gctx, cancel := context.WithTimeout(ctx, callTimeout)
	resp, err := r.cli.Get(gctx, prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return err
	}
	for _, kv := range resp.Kvs {
		if err := deliver(string(kv.Key), kv.Value, kv.ModRevision); err != nil {
			return err
		}
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := r.cli.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1), clientv3.WithFilterDelete())
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errWatchBroken
			}
			for _, ev := range wr.Events {
				if err := deliver(string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision); err != nil {
					return err
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
