package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/rendezvous"
)

// Watch reports, once, when the running round ends for a reason outside
// this node: another node's workers failed (Failure true), a node was lost
// or nodes are waiting to join that allow a larger round (a membership
// change; with --plan sizes, nodes that do not are hot spares), the job finished elsewhere, or this node's own lease
// was lost. It also ends the round itself for a lost node or a waiting
// one. The channel closes when ctx ends.
func (r *Rendezvous) Watch(ctx context.Context, round rendezvous.Round) <-chan rendezvous.Event {
	out := make(chan rendezvous.Event, 1)
	go func() {
		defer close(out)
		lctx, cancel, lease := r.whileLeased(ctx)
		defer cancel()
		lctx, stop := r.whileStore(lctx)
		defer stop()
		// A broken watch (a leader change in a store of several members)
		// does not end the round while the lease holds: the round's state
		// is read again and the watches replay what they missed.
		ev, err := retryBrokenWatch(lctx, r.cfg.Log, fmt.Sprintf("round %d", round.Number), func() (rendezvous.Event, error) {
			return r.watchRound(lctx, round.Number)
		})
		switch {
		case ctx.Err() != nil:
			return
		case r.goneErr() != nil:
			ev = rendezvous.Event{Reason: r.goneErr().Error()}
		case lease.lost():
			ev = rendezvous.Event{Reason: "this node's lease ended: etcd at " + strings.Join(r.cli.Endpoints(), ",") + " unreachable for longer than the lease TTL"}
		case err != nil:
			ev = rendezvous.Event{Reason: "lost contact with etcd at " + strings.Join(r.cli.Endpoints(), ",") + ": " + err.Error()}
		}
		select {
		case out <- ev:
		case <-ctx.Done():
		}
	}()
	return out
}

// watchRound waits for the end of round t; see Watch.
func (r *Rendezvous) watchRound(ctx context.Context, t int) (rendezvous.Event, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctlWatch, stopCtl := r.takeCtlWatch(t)
	if ctlWatch == nil {
		ctlWatch, stopCtl = r.cli.Watch(clientv3.WithRequireLeader(wctx), r.k.ctl(), clientv3.WithPrefix()), cancel
	}
	defer stopCtl()
	c, _, err := r.readControl(ctx)
	if err != nil {
		return rendezvous.Event{}, err
	}
	rec, ok := c.closed[t]
	if !ok {
		return rendezvous.Event{}, fmt.Errorf("round %d has no record", t)
	}
	// Everything since the round closed: members leaving, nodes waiting.
	from := clientv3.WithRev(c.closedRev[t] + 1)
	memberWatch := r.cli.Watch(clientv3.WithRequireLeader(wctx), r.k.joinPrefix(t), clientv3.WithPrefix(), from, clientv3.WithPrevKV())
	waiterWatch := r.cli.Watch(clientv3.WithRequireLeader(wctx), r.k.joinPrefix(t+1), clientv3.WithPrefix(), from)
	if ev, over := r.roundOver(ctx, c, t); over {
		return ev, nil
	}
	// The nodes waiting to join the next round (spares, or new arrivals).
	waiting := map[string]bool{}
	for {
		select {
		case wr, ok := <-ctlWatch:
			if !ok || wr.Err() != nil {
				return rendezvous.Event{}, watchErr(wr, ok)
			}
			r.applyEvents(ctx, c, wr.Events)
			if err := c.foreignErr(); err != nil {
				return rendezvous.Event{}, err
			}
			if ev, over := r.roundOver(ctx, c, t); over {
				return ev, nil
			}
		case wr, ok := <-memberWatch:
			if !ok || wr.Err() != nil {
				return rendezvous.Event{}, watchErr(wr, ok)
			}
			for _, ev := range wr.Events {
				id := strings.TrimPrefix(string(ev.Kv.Key), r.k.joinPrefix(t))
				if ev.Type != clientv3.EventTypeDelete {
					continue
				}
				if r.isMember(ctx, t, rec, id, ev.PrevKv) {
					r.endRound(ctx, t, lostNodeReason(id, r.lostAddr(ctx, ev.PrevKv, id)))
				}
			}
		case wr, ok := <-waiterWatch:
			if !ok || wr.Err() != nil {
				return rendezvous.Event{}, watchErr(wr, ok)
			}
			for _, ev := range wr.Events {
				id := strings.TrimPrefix(string(ev.Kv.Key), r.k.joinPrefix(t+1))
				if ev.Type != clientv3.EventTypePut {
					delete(waiting, id)
					continue
				}
				if _, err := r.openNode(ctx, ev.Kv, id); err != nil {
					continue
				}
				waiting[id] = true
				// A bigger round only if the waiting nodes allow a larger
				// size: with a --plan, the others are spares.
				if grown := r.cfg.Shape.usable(rec.Size + len(waiting)); grown > rec.Size {
					r.endRound(ctx, t, fmt.Sprintf("node %s is waiting to join (%d nodes can run as %d)", id, rec.Size+len(waiting), grown))
				}
			}
		case <-ctx.Done():
			return rendezvous.Event{}, ctx.Err()
		}
	}
}

// isMember reports whether node id, whose join key joinKV was (nil if
// unknown), is a member of round t, closed as rec. A node of unknown
// arrival counts as a member: ending a round without need costs a new
// round, missing a lost member costs a hang.
func (r *Rendezvous) isMember(ctx context.Context, t int, rec RoundRecord, id string, joinKV *mvccpb.KeyValue) bool {
	if rec.Arrivals != nil {
		if joinKV == nil {
			return true
		}
		_, member := arrivalRank(rec.Arrivals, joinKV.CreateRevision)
		return member
	}
	resp, err := r.cli.Get(ctx, r.k.rank(t, id), clientv3.WithCountOnly())
	return err != nil || resp.Count > 0
}

// whileLeased returns a context that also ends when this node's current
// lease does (an etcd call blocked on an unreachable server then
// returns), and that lease.
func (r *Rendezvous) whileLeased(ctx context.Context) (context.Context, context.CancelFunc, *keptLease) {
	lease := r.lease.Load()
	lctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-lease.done:
			cancel()
		case <-lctx.Done():
		}
	}()
	return lctx, cancel, lease
}

// roundOver turns a moved round counter or a set outcome into the event
// that ends round t.
func (r *Rendezvous) roundOver(ctx context.Context, c *control, t int) (rendezvous.Event, bool) {
	if c.outcome != nil {
		return rendezvous.Event{Reason: "the job " + c.outcome.String(), Failure: c.outcome.How != outcomeSucceeded}, true
	}
	if c.round <= t {
		return rendezvous.Event{}, false
	}
	if end, ok := c.ends[t]; ok {
		return rendezvous.Event{Reason: end.String(), Failure: end.Failure}, true
	}
	return rendezvous.Event{Reason: "round " + strconv.Itoa(t) + " ended"}, true
}

// endRound advances the round counter from t, fenced: a no-op if the
// round already moved on. Errors are left to the watches to surface.
func (r *Rendezvous) endRound(ctx context.Context, t int, reason string) {
	_, _ = r.cli.Txn(ctx).
		If(r.isRound(t)).
		Then(r.putRound(t+1), r.put(r.k.end(t), kindRoundEnd, roundEnd{Reason: clip(reason)})).
		Commit()
}

// maxReasonLen bounds the reason a round's end records.
const maxReasonLen = 4 << 10

// clip shortens a reason to maxReasonLen bytes.
func clip(reason string) string {
	if len(reason) > maxReasonLen {
		return reason[:maxReasonLen] + "..."
	}
	return reason
}

// openNode opens and checks the join record kv of node id; a refused one
// is removed.
func (r *Rendezvous) openNode(ctx context.Context, kv *mvccpb.KeyValue, id string) (NodeRecord, error) {
	payload, ok := r.g.Open(string(kv.Key), kv.Value, kv.ModRevision)
	if !ok {
		r.deleteIfUnchanged(ctx, kv)
		return NodeRecord{}, errForged
	}
	n, err := parseNode(payload, id, r.cfg.Shape)
	if err != nil {
		r.g.Refuse(string(kv.Key), kv.ModRevision, err.Error())
	}
	return n, err
}

// errForged marks a value that is not this job's.
var errForged = errors.New("rendezvous: value not sealed by this job")

// deleteIfUnchanged removes kv, a refused value, unless it changed since.
func (r *Rendezvous) deleteIfUnchanged(ctx context.Context, kv *mvccpb.KeyValue) {
	if !r.trusted.Load() {
		return
	}
	key := string(kv.Key)
	if r.ifUnchanged(ctx, key, kv.ModRevision, clientv3.OpDelete(key)) {
		r.cfg.Log.Warnf("rendezvous: removed the refused value of %s", key)
	}
}

// lostNodeReason says that a member of the round was lost, for every
// node's log: the agent's id (host, pid, random) and the address its
// workers were reached at.
func lostNodeReason(id, addr string) string {
	at := ""
	if addr != "" {
		at = " at " + addr
	}
	return "node " + id + at + " was lost: its lease ended (the agent was killed, its host went down, or it was cut off from etcd)"
}

// lostAddr is the address in a lost member's last join record, "" when
// it cannot be read.
func (r *Rendezvous) lostAddr(ctx context.Context, kv *mvccpb.KeyValue, id string) string {
	if kv == nil {
		return ""
	}
	n, err := r.openNode(ctx, kv, id)
	if err != nil {
		return ""
	}
	return n.Addr
}

// keptWatch is the control watch of a join that succeeded, kept open for
// the round's Watch: an agent's watch stream then stays open from its
// join to the round's end, instead of being closed and opened again
// between the two, by every node at once as the round closes.
type keptWatch struct {
	round  int
	ch     clientv3.WatchChan
	cancel context.CancelFunc
}

// keepCtlWatch keeps the control watch of the join into round t (ended
// by cancel, or Close) for takeCtlWatch; one kept before is ended.
func (r *Rendezvous) keepCtlWatch(t int, ch clientv3.WatchChan, cancel context.CancelFunc) {
	r.keptMu.Lock()
	old := r.kept
	r.kept = &keptWatch{round: t, ch: ch, cancel: cancel}
	r.keptMu.Unlock()
	if old != nil {
		old.cancel()
	}
}

// takeCtlWatch returns the kept control watch of round t and its end, or
// nil (a kept watch of another round is ended).
func (r *Rendezvous) takeCtlWatch(t int) (clientv3.WatchChan, context.CancelFunc) {
	r.keptMu.Lock()
	kept := r.kept
	r.kept = nil
	r.keptMu.Unlock()
	switch {
	case kept == nil:
		return nil, nil
	case kept.round != t:
		kept.cancel()
		return nil, nil
	}
	return kept.ch, kept.cancel
}
