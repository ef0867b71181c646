package etcd

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The closer's side of a join: it counts the nodes that joined the round
// and closes it.

// startCounting makes this node the round's closer: it reads every join
// key and watches for more.
func (j *joiner) startCounting(ctx context.Context) (clientv3.WatchChan, error) {
	r := j.r
	if !j.c.full {
		// Joined by the guarded transaction alone: the round's record
		// needs the restart count, and a later round the previous one's.
		c, _, err := r.readControl(ctx)
		if err != nil {
			return nil, err
		}
		j.c = c
	}
	resp, err := r.cli.Get(ctx, r.k.joinPrefix(j.target), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	j.members, j.askers, j.duplicates = map[string]NodeRecord{}, map[int]int{}, 0
	for _, kv := range resp.Kvs {
		j.applyJoin(&clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
	}
	j.seenRev = resp.Header.Revision
	w := r.cli.Watch(clientv3.WithRequireLeader(ctx), r.k.joinPrefix(j.target), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	return w, j.maybeClose(false)
}

// applyJoin updates the closer's view of the joined nodes.
// Nodes asking for a --node-rank that another node asks for are counted
// once (see admit).
func (j *joiner) applyJoin(ev *clientv3.Event) {
	id := strings.TrimPrefix(string(ev.Kv.Key), j.r.k.joinPrefix(j.target))
	if ev.Type == clientv3.EventTypeDelete {
		if n, ok := j.members[id]; ok && n.NodeRank >= 0 {
			if j.askers[n.NodeRank]--; j.askers[n.NodeRank] > 0 {
				j.duplicates--
			}
		}
		delete(j.members, id)
		return
	}
	n, err := j.r.openNode(j.ctx, ev.Kv, id)
	if err != nil {
		return
	}
	if _, known := j.members[id]; !known && n.NodeRank >= 0 {
		if j.askers[n.NodeRank]++; j.askers[n.NodeRank] > 1 {
			j.duplicates++
		}
	}
	n.Revision = ev.Kv.CreateRevision
	j.members[id] = n
}

// joinedCount is the number of nodes the round would admit.
func (j *joiner) joinedCount() int { return len(j.members) - j.duplicates }

// maybeClose applies the closing rules: enough nodes for the largest
// allowed size (MaxNodes, or the largest the --plan layout allows) closes
// at once; enough for a smaller allowed size starts the last call, and
// closes when it ends or when every member of the previous round that is
// still alive is back: a restart of the same nodes need not wait, and
// neither does one after a loss, as a node whose lease ended is not
// coming back within a last call (if it does later, it joins as a late
// joiner). The round runs with the largest allowed size the joined nodes
// give; the others wait as spares.
func (j *joiner) maybeClose(lastCallOver bool) error {
	sh := j.r.cfg.Shape
	n := j.joinedCount()
	use := sh.usable(n)
	switch {
	case use > 0 && use >= sh.largest(), use > 0 && (lastCallOver || j.previousBack()):
		return j.close(use)
	case use > 0 && j.lastCall == nil:
		j.lastCall = time.NewTimer(j.r.cfg.LastCallTimeout)
	case use == 0 && j.lastCall != nil:
		j.lastCall.Stop()
		j.lastCall = nil
	}
	return nil
}

// previousBack reports whether every member of the previous round that is
// still alive (its join key of that round, under its lease, still there)
// has joined this one (agents keep their id across rounds). With none
// alive (a job that starts again on new nodes) the round is as a first
// one.
func (j *joiner) previousBack() bool {
	prev, ok := j.c.closed[j.target-1]
	if !ok {
		return false
	}
	if j.previous == nil {
		alive, rev, err := j.r.aliveMembers(j.ctx, prev)
		if err != nil {
			return false
		}
		j.previous, j.prevPrefix = alive, j.r.k.joinPrefix(j.target-1)
		// A member whose lease ends from now on is gone too (watchPrevious).
		j.prevWatch = j.r.cli.Watch(clientv3.WithRequireLeader(j.wctx), j.prevPrefix, clientv3.WithPrefix(),
			clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	}
	for id := range j.previous {
		if _, back := j.members[id]; !back {
			return false
		}
	}
	return len(j.previous) > 0
}

// aliveMembers returns the ids of round rec's members that are still
// alive: whose join key of that round (under the node's lease: it ends
// with a lost node) is still there, and the revision read at. The members
// are the record's arrivals, or, when its ranks did not follow arrival,
// the ids of its rank keys (written without a lease: they outlive their
// nodes).
func (r *Rendezvous) aliveMembers(ctx context.Context, rec RoundRecord) (map[string]bool, int64, error) {
	prefix := r.k.joinPrefix(rec.Round)
	resp, err := r.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, 0, err
	}
	var ranked map[string]bool
	if rec.Arrivals == nil {
		rprefix := r.k.rankPrefix(rec.Round)
		rresp, err := r.cli.Get(ctx, rprefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(resp.Header.Revision))
		if err != nil {
			return nil, 0, err
		}
		ranked = map[string]bool{}
		for _, kv := range rresp.Kvs {
			ranked[strings.TrimPrefix(string(kv.Key), rprefix)] = true
		}
	}
	alive := map[string]bool{}
	for _, kv := range resp.Kvs {
		id := strings.TrimPrefix(string(kv.Key), prefix)
		if _, member := arrivalRank(rec.Arrivals, kv.CreateRevision); member || ranked[id] {
			alive[id] = true
		}
	}
	return alive, resp.Header.Revision, nil
}

// watchPrevious applies the end of previous members' keys (their lease
// ended: a lost node); a broken watch makes previousBack read them again.
func (j *joiner) watchPrevious(wr clientv3.WatchResponse, ok bool) error {
	if !ok || wr.Err() != nil {
		j.previous, j.prevWatch = nil, nil
		return j.maybeClose(false)
	}
	for _, ev := range wr.Events {
		if ev.Type == clientv3.EventTypeDelete {
			delete(j.previous, strings.TrimPrefix(string(ev.Kv.Key), j.prevPrefix))
		}
	}
	return j.maybeClose(false)
}

// rankBatch bounds the puts of one transaction (etcd allows 128 operations).
const rankBatch = 100

// close writes the members' ranks, in batches, then the round's record,
// once. Every transaction requires the round counter still at this round,
// no record yet, and this node still the closer; the record's also requires
// that no node joined after the closer's view (one range compare, not one
// per member). A member that left just before is caught by Watch.
func (j *joiner) close(size int) error {
	r := j.r
	nodes := make([]NodeRecord, 0, len(j.members))
	for _, n := range j.members {
		if n.PrevRound != j.target-1 {
			n.PrevRank = -1 // back from an older round: it arrives as new
		}
		nodes = append(nodes, n)
	}
	ordered := orderMembers(admit(nodes), size)
	fence := []clientv3.Cmp{
		r.isRound(j.target),
		clientv3.Compare(clientv3.CreateRevision(r.k.closed(j.target)), "=", 0),
		r.is(r.k.closer(j.target), kindCloser, r.id),
	}
	base := 0
	for _, m := range ordered {
		base += m.Nproc
	}
	rec := RoundRecord{Round: j.target, Size: len(ordered), WorldSize: base,
		MasterAddr: ordered[0].Addr, MasterPort: ordered[0].MasterPort, Restarts: j.c.restarts, ShapeHash: shapeHash(r.shape),
		Arrivals: arrivalRuns(ordered)}
	if rec.Arrivals == nil {
		if written, err := j.writeRanks(ordered, fence); !written {
			return err // a lost race needs nothing more: the watches tell
		}
	}
	last := append(fence, clientv3.Compare(clientv3.CreateRevision(r.k.joinPrefix(j.target)), "<", j.seenRev+1).WithPrefix())
	_, err := r.cli.Txn(j.ctx).If(last...).Then(r.put(r.k.closed(j.target), kindClosed, rec)).Commit()
	return err
}

// writeRanks writes the members' rank keys, in batches, each fenced; it
// reports whether all were written.
func (j *joiner) writeRanks(ordered []NodeRecord, fence []clientv3.Cmp) (bool, error) {
	r := j.r
	// Ranks left by an earlier attempt to close go first (etcd refuses a
	// delete and puts of the same keys in one transaction).
	resp, err := r.cli.Txn(j.ctx).If(fence...).Then(clientv3.OpDelete(r.k.rankPrefix(j.target), clientv3.WithPrefix())).Commit()
	if err != nil || !resp.Succeeded {
		return false, err
	}
	var ops []clientv3.Op
	ranks := assignRanks(ordered)
	for i, m := range ordered {
		ops = append(ops, r.put(r.k.rank(j.target, m.ID), kindRanks, ranks[i].record()))
		if len(ops) == rankBatch || i == len(ordered)-1 {
			resp, err := r.cli.Txn(j.ctx).If(fence...).Then(ops...).Commit()
			if err != nil || !resp.Succeeded {
				return false, err
			}
			ops = nil
		}
	}
	return true, nil
}
