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
	ctlWatch := r.cli.Watch(clientv3.WithRequireLeader(wctx), r.k.ctl(), clientv3.WithPrefix())
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
	if c.outcome != "" {
		return rendezvous.Event{Reason: "the job " + rendezvous.OutcomeText(c.outcome), Failure: !strings.HasPrefix(c.outcome, "succeeded")}, true
	}
	if c.round <= t {
		return rendezvous.Event{}, false
	}
	reason := "round " + strconv.Itoa(t) + " ended"
	if end, ok := c.ends[t]; ok {
		reason = end
	}
	return rendezvous.Event{Reason: reason, Failure: strings.HasPrefix(reason, failurePrefix)}, true
}

// failurePrefix marks the end of a round caused by failed workers.
const failurePrefix = "failure: "

// endRound advances the round counter from t, fenced: a no-op if the
// round already moved on. Errors are left to the watches to surface.
func (r *Rendezvous) endRound(ctx context.Context, t int, reason string) {
	reason = clip(reason)
	_, _ = r.cli.Txn(ctx).
		If(r.is(r.k.round(), strconv.Itoa(t))).
		Then(r.put(r.k.round(), strconv.Itoa(t+1)), r.put(r.k.end(t), reason)).
		Commit()
}

// Fail reports that this node's workers failed in round. It ends the
// round for every node and takes one restart from the job-wide budget; it
// returns false when the budget is spent or the failure is not retriable,
// and then the job has failed everywhere. A round already ended by another
// node's failure costs nothing more.
//
// exitCode is the code this node exits with when the job fails (its
// failing worker's); the others exit with it too.
func (r *Rendezvous) Fail(ctx context.Context, round rendezvous.Round, reason string, exitCode int, retriable bool) (bool, error) {
	t := round.Number
	reason = clip(reason)
	// Each call is bounded and tried again while etcd may stay
	// unreachable (UnreachableTimeout): a call at a member that cannot
	// reach the others' consensus would otherwise wait forever.
	ctx, cancel := context.WithTimeout(ctx, r.cfg.UnreachableTimeout)
	defer cancel()
	ctx, stop := r.whileStore(ctx)
	defer stop()
	for {
		cctx, ccancel := context.WithTimeout(ctx, callTimeout)
		restart, done, err := r.failOnce(cctx, t, reason, exitCode, retriable)
		ccancel()
		switch {
		case done:
			return restart, err
		case r.goneErr() != nil:
			return false, r.goneErr()
		case ctx.Err() != nil:
			return false, fmt.Errorf("rendezvous: report the failure: etcd at %s did not answer within %v: %w", strings.Join(r.cli.Endpoints(), ","), r.cfg.UnreachableTimeout, err)
		}
	}
}

// failOnce is one try of Fail under ctx, a call's deadline; done is false
// when it should be tried again (the deadline passed, or the fence moved).
func (r *Rendezvous) failOnce(ctx context.Context, t int, reason string, exitCode int, retriable bool) (restart, done bool, err error) {
	c, _, err := r.readControl(ctx)
	if err != nil {
		return false, ctx.Err() == nil, err
	}
	switch {
	case c.outcome != "":
		return false, true, outcomeErr(c.outcome)
	case c.round > t:
		return true, true, nil // the round already ended; its restart is counted
	}
	fence := []clientv3.Cmp{
		r.is(r.k.round(), strconv.Itoa(t)),
		r.is(r.k.restarts(), strconv.Itoa(c.restarts)),
	}
	var then []clientv3.Op
	restart = retriable && c.restarts < r.cfg.Shape.MaxRestarts
	if restart {
		then = []clientv3.Op{
			r.put(r.k.round(), strconv.Itoa(t+1)),
			r.put(r.k.restarts(), strconv.Itoa(c.restarts+1)),
			r.put(r.k.end(t), failurePrefix+reason),
		}
	} else {
		then = []clientv3.Op{r.put(r.k.outcome(), failedOutcome(reason, exitCode))}
	}
	resp, err := r.cli.Txn(ctx).If(fence...).Then(then...).Commit()
	if err != nil {
		return false, ctx.Err() == nil, err
	}
	return restart, resp.Succeeded, nil
}

// Succeed reports that this node's workers all succeeded in round and
// waits for the job's outcome instead of a fixed barrier: nil once every
// member succeeded, rendezvous.ErrRoundEnded when the round ended (this
// node must join the next one), rendezvous.ErrJobFailed when the job
// failed elsewhere.
func (r *Rendezvous) Succeed(ctx context.Context, round rendezvous.Round) error {
	return r.succeedAs(ctx, round, doneOK)
}

// SucceedStopped is Succeed for workers that exited 0 on the job's stop
// request: the job's outcome is then preempted, even if the request's
// key is gone by the time the last node reports (a stranger may delete
// it on an etcd without access control).
func (r *Rendezvous) SucceedStopped(ctx context.Context, round rendezvous.Round) error {
	return r.succeedAs(ctx, round, doneStopped)
}

// The values of a node's done key: its workers succeeded, or stopped
// cleanly on the stop request.
const (
	doneOK      = "ok"
	doneStopped = "stopped"
)

func (r *Rendezvous) succeedAs(ctx context.Context, round rendezvous.Round, how string) error {
	t := round.Number
	for renewed := false; ; renewed = true {
		if r.lease.Load().lost() {
			// The workers succeeded while this node was cut off or stopped
			// for longer than the lease: the round may still be the
			// current one (nobody watched it end), and then its success
			// is this node's to report, under a new lease. Ended, the
			// report is refused and the node joins the next round.
			if err := r.openLease(ctx); err != nil {
				return fmt.Errorf("rendezvous: report this node's success: %w", err)
			}
			r.cfg.Log.Warnf("rendezvous %s: this node's lease ended while its workers finished (etcd unreachable for longer than %v); reporting their success under a new one", r.cfg.Shape.RunID, r.cfg.LeaseTTL)
		}
		wctx, cancel, lease := r.whileLeased(ctx)
		_, err := retryBrokenWatch(wctx, r.cfg.Log, fmt.Sprintf("round %d's outcome", t), func() (struct{}, error) {
			return struct{}{}, r.succeed(wctx, t, round.GroupWorldSize, lease.id, how)
		})
		cancel()
		if err != nil && lease.lost() && ctx.Err() == nil {
			if !renewed {
				continue
			}
			return fmt.Errorf("rendezvous: this node's lease ended while waiting for the job's outcome: etcd at %s unreachable", strings.Join(r.cli.Endpoints(), ","))
		}
		return err
	}
}

func (r *Rendezvous) succeed(ctx context.Context, t, members int, lease clientv3.LeaseID, how string) error {
	wctx := ctx
	ctlWatch := r.cli.Watch(clientv3.WithRequireLeader(wctx), r.k.ctl(), clientv3.WithPrefix())
	put, err := r.reportDone(ctx, t, lease, how)
	if err != nil {
		return err
	}
	if put == nil {
		return rendezvous.ErrRoundEnded
	}
	// The last node to finish sees every done key (each counts after its
	// own put) and records the outcome, once it has checked that they are
	// this job's (a stranger's done key must not end the job early).
	// With a stop request recorded, the job did not finish: it stopped
	// cleanly, and is preempted.
	if int(put.Responses[1].GetResponseRange().Count) >= members {
		if done, stopped := r.allDone(ctx, t, members); done {
			if err := r.recordOutcome(ctx, t, stopped); err != nil {
				return err
			}
		}
	}
	c, _, err := r.readControl(ctx)
	if err != nil {
		return err
	}
	for {
		switch {
		case strings.HasPrefix(c.outcome, "succeeded"):
			return nil
		case c.outcome != "":
			return outcomeErr(c.outcome)
		case c.round > t:
			return rendezvous.ErrRoundEnded
		}
		select {
		case wr, ok := <-ctlWatch:
			if !ok || wr.Err() != nil {
				return watchErr(wr, ok)
			}
			r.applyEvents(ctx, c, wr.Events)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// maxMendRetries bounds how often a report retries after finding the
// round counter forged: a stranger who keeps writing it cannot hold a
// node for ever, only send it to the next round.
const maxMendRetries = 5

// reportDone puts this node's done key for round t, fenced by the round
// counter, and counts the round's done keys. It returns nil when the
// round ended. A counter that failed the fence because a stranger
// overwrote it (refused and mended by the read) is not an end: the
// report is made again.
func (r *Rendezvous) reportDone(ctx context.Context, t int, lease clientv3.LeaseID, how string) (*clientv3.TxnResponse, error) {
	for try := 0; ; try++ {
		put, err := r.cli.Txn(ctx).
			If(r.is(r.k.round(), strconv.Itoa(t))).
			Then(r.put(r.k.done(t, r.id), how, clientv3.WithLease(lease)),
				clientv3.OpGet(r.k.donePrefix(t), clientv3.WithPrefix(), clientv3.WithCountOnly())).
			Commit()
		if err != nil || put.Succeeded {
			return put, err
		}
		c, _, err := r.readControl(ctx)
		if err != nil {
			return nil, err
		}
		if c.round != t || c.outcome != "" || try >= maxMendRetries {
			return nil, nil
		}
	}
}

// recordOutcome records the outcome of round t, whose members all
// reported: preempted when a stop request is recorded or a member's
// workers stopped on one, else succeeded.
func (r *Rendezvous) recordOutcome(ctx context.Context, t int, stopped bool) error {
	outcome := "succeeded in round " + strconv.Itoa(t)
	c, _, err := r.readControl(ctx)
	if err != nil {
		return err
	}
	switch {
	case c.stop != nil:
		outcome = preemptedPrefix + strconv.Itoa(t) + ": " + c.stop.Reason
	case stopped:
		outcome = preemptedPrefix + strconv.Itoa(t) + ": a node's workers stopped on the job's stop request"
	}
	for try := 0; ; try++ {
		resp, err := r.cli.Txn(ctx).
			If(r.is(r.k.round(), strconv.Itoa(t)), clientv3.Compare(clientv3.CreateRevision(r.k.outcome()), "=", 0)).
			Then(r.put(r.k.outcome(), clip(outcome))).
			Commit()
		if err != nil || resp.Succeeded || try >= maxMendRetries {
			return err
		}
		// Fenced out: by another node's outcome or the round's end, or by
		// a stranger's round counter, which the read refuses and mends.
		if c, _, err = r.readControl(ctx); err != nil || c.round != t || c.outcome != "" {
			return err
		}
	}
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

// allDone reports whether at least members of the done keys of round t
// are this job's; the others are removed.
func (r *Rendezvous) allDone(ctx context.Context, t, members int) (done, stopped bool) {
	resp, err := r.cli.Get(ctx, r.k.donePrefix(t), clientv3.WithPrefix())
	if err != nil {
		return false, false
	}
	valid := 0
	for _, kv := range resp.Kvs {
		v, ok := r.g.open(string(kv.Key), kv.Value, kv.ModRevision)
		switch {
		case ok && string(v) == doneOK:
			valid++
		case ok && string(v) == doneStopped:
			valid++
			stopped = true
		default:
			r.deleteIfUnchanged(ctx, kv)
		}
	}
	return valid >= members, stopped
}

// openNode opens and checks the join record kv of node id; a refused one
// is removed.
func (r *Rendezvous) openNode(ctx context.Context, kv *mvccpb.KeyValue, id string) (NodeRecord, error) {
	payload, ok := r.g.open(string(kv.Key), kv.Value, kv.ModRevision)
	if !ok {
		r.deleteIfUnchanged(ctx, kv)
		return NodeRecord{}, errForged
	}
	n, err := parseNode(payload, id, r.cfg.Shape)
	if err != nil {
		r.g.refuse(string(kv.Key), kv.ModRevision, err.Error())
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
