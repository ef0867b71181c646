package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/rendezvous"
)

// join runs one attempt to join a round: it puts this node's join key
// (fenced by the round counter) and waits until the round closes. It
// returns errRetry when the round moved on before closing.
func (r *Rendezvous) join(ctx context.Context, me NodeRecord) (_ joined, err error) {
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	// Watch first, then write and read: a watch from the current revision
	// starts at once, while one from a past revision waits for etcd's
	// catch-up. The control watch outlives a join that succeeds: the
	// round's Watch goes on with it (keepCtlWatch).
	cctx, ccancel := context.WithCancel(r.life)
	ctlWatch := r.cli.Watch(clientv3.WithRequireLeader(cctx), r.k.ctl(), clientv3.WithPrefix())
	c, target, put, err := r.putJoin(ctx, me)
	if err != nil {
		ccancel()
		return joined{}, err
	}
	defer func() {
		if err != nil {
			ccancel()
			return
		}
		r.keepCtlWatch(target, ctlWatch, ccancel)
	}()
	r.joining = target
	j := &joiner{r: r, ctx: ctx, target: target, c: c, joinRev: put.Header.Revision}
	if prev := put.Responses[0].GetResponsePut().PrevKv; prev != nil {
		j.joinRev = prev.CreateRevision // joined before, in an earlier attempt
	}
	if r.cfg.NodeRank >= 0 {
		if held := put.Responses[2].GetResponseTxn(); !held.Succeeded {
			if kvs := held.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				var holder string
				if !r.read(string(kvs[0].Key), kvs[0].Value, kvs[0].ModRevision, kindNodeRank, &holder) {
					// A stranger's key holds the rank: remove it and retry.
					r.deleteIfUnchanged(ctx, kvs[0])
					return joined{}, errRetry
				}
				if holder != r.id {
					return joined{}, r.nodeRankTaken(ctx, target, holder, put.Header.Revision)
				}
			}
		}
	}
	if claimed := put.Responses[1].GetResponseTxn(); claimed.Succeeded {
		j.closer = true
	} else if kvs := claimed.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		// Holding the key from an earlier attempt is being the closer too.
		var id string
		ok := r.read(string(kvs[0].Key), kvs[0].Value, kvs[0].ModRevision, kindCloser, &id)
		if !ok {
			// A stranger's closer key would stall the round: remove it
			// (the watch then reports it gone, and a node claims it).
			r.deleteIfUnchanged(ctx, kvs[0])
		}
		j.closerID = id
		j.closer = ok && j.closerID == r.id
	}
	return j.run(wctx, ctlWatch)
}

// putJoin puts this node's join key into the round it can join, with the
// closer's key if the round has none yet (the first node to join counts
// the others and closes), and returns what it knows of the control keys.
// The first try is one transaction that also checks the job's shape: it
// assumes the round after the last this node ran (0 at first) is open.
// If it is, the transaction's guards are all this node learns: the round
// counter is at that round, which has not closed, the job has no outcome,
// and its shape is this node's, sealed with this job's secret. The
// closer reads the other control keys when it starts counting
// (startCounting): nobody else needs them, and a job's every node
// reading them made each join a read of the control keys too. If the
// round is not open, the transaction reads the control keys instead
// (creating the job first, if this node is its first), they say which
// round to join, and a second transaction joins that one. errRetry means
// the round moved on meanwhile.
func (r *Rendezvous) putJoin(ctx context.Context, val NodeRecord) (*control, int, *clientv3.TxnResponse, error) {
	guess := r.lastRound + 1
	readCtl := clientv3.OpGet(r.k.ctl(), clientv3.WithPrefix())
	resp, err := r.cli.Txn(ctx).
		If(r.isRound(guess),
			clientv3.Compare(clientv3.CreateRevision(r.k.closed(guess)), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(r.k.outcome()), "=", 0),
			r.isShape()).
		Then(r.joinOps(guess, val)...).
		Else(r.createOrRead(guess, readCtl)).
		Commit()
	if err != nil {
		return nil, 0, nil, etcdFailure(err)
	}
	c := newControl()
	c.rev = resp.Header.Revision
	if resp.Succeeded {
		c.round, c.shape = guess, []byte(r.shape)
		r.trusted.Store(true) // the guard matched this node's sealed shape
		return c, guess, resp, nil
	}
	read := resp.Responses[0].GetResponseTxn().Responses // readCtl's is last
	r.applyKVs(ctx, c, read[len(read)-1].GetResponseRange().Kvs)
	if err := c.foreignErr(); err != nil {
		return nil, 0, nil, err
	}
	if c.outcome != nil {
		return nil, 0, nil, outcomeErr(c.outcome)
	}
	if err := r.checkShape(ctx, c); err != nil {
		r.failUnformed(ctx, c, err)
		return nil, 0, nil, err
	}
	target := c.round
	if _, running := c.closed[target]; running {
		if r.lastRound == target {
			// This node ran that round and is back without it ending: its
			// workers were stopped (its lease ended while etcd was out of
			// reach, or it lost its watch). The round has lost a member;
			// with every node in the same case, nobody else would end it.
			r.endRound(ctx, target, fmt.Sprintf("node %s left round %d (its workers were stopped: it lost contact with etcd)", r.id, target))
			return nil, 0, nil, errRetry
		}
		if rec := c.closed[target]; r.cfg.Shape.spareBeside(rec.Size) {
			r.becameSpare(rec)
		}
		target++ // the round runs without us: wait to join the next one
	}
	resp, err = r.cli.Txn(ctx).
		If(r.isRound(c.round)).
		Then(r.joinOps(target, val)...).
		Commit()
	if err != nil {
		return nil, 0, nil, etcdFailure(err)
	}
	if !resp.Succeeded {
		return nil, 0, nil, errRetry
	}
	return c, target, resp, nil
}

// createOrRead is the first try's other branch: it reads the control
// keys, after recording the job's shape and creating the round and
// restart counters if there is no job yet (the job's first node, which
// then joins round 0 with the second transaction).
func (r *Rendezvous) createOrRead(guess int, readCtl clientv3.Op) clientv3.Op {
	if guess != 0 {
		return clientv3.OpTxn(nil, []clientv3.Op{readCtl}, nil)
	}
	return clientv3.OpTxn(r.noJob(nil),
		[]clientv3.Op{r.putShape(), r.putRound(0), r.putRestarts(0), readCtl},
		[]clientv3.Op{readCtl})
}

// joinOps puts this node's join key into round t and claims the round's
// closer key if it has none (a nested transaction that reads the key
// otherwise).
func (r *Rendezvous) joinOps(t int, val NodeRecord) []clientv3.Op {
	lease := r.lease.Load().id
	claim := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(r.k.closer(t)), "=", 0)},
		[]clientv3.Op{r.put(r.k.closer(t), kindCloser, r.id, clientv3.WithLease(lease))},
		[]clientv3.Op{clientv3.OpGet(r.k.closer(t))})
	ops := []clientv3.Op{r.put(r.k.join(t, r.id), kindJoin, val, clientv3.WithLease(lease), clientv3.WithPrevKV()), claim}
	if r.cfg.NodeRank >= 0 {
		// The asked-for rank, held by the first node to ask in the round.
		key := r.k.nodeRank(t, r.cfg.NodeRank)
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
			[]clientv3.Op{r.put(key, kindNodeRank, r.id, clientv3.WithLease(lease))},
			[]clientv3.Op{clientv3.OpGet(key)}))
	}
	return ops
}

// nodeRankTaken handles a join into round t whose --node-rank another
// node holds: this node leaves the round, then waits up to the lease TTL
// for the holder's key to go (a holder that died, for example this same
// node before a quick restart, loses it then) and joins again; a holder
// still there is a second node asking for the same rank, refused.
func (r *Rendezvous) nodeRankTaken(ctx context.Context, t int, holder string, rev int64) error {
	if _, err := r.cli.Delete(ctx, r.k.join(t, r.id)); err != nil {
		return etcdFailure(err)
	}
	key := r.k.nodeRank(t, r.cfg.NodeRank)
	wctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseTTL+time.Second)
	defer cancel()
	r.cfg.Log.Warnf("rendezvous %s: --node-rank=%d is held by node %s in round %d; waiting up to %v for it to go", r.cfg.Shape.RunID, r.cfg.NodeRank, holder, t, r.cfg.LeaseTTL+time.Second)
	w := r.cli.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithRev(rev+1))
	for {
		select {
		case wr, ok := <-w:
			if !ok || wr.Err() != nil {
				if ctx.Err() == nil && wctx.Err() != nil {
					return setting.Errorf("%w: %s=%d is already taken by node %s in round %d: give each node its own rank", rendezvous.ErrInvalidNode, setting.Name("NodeRank"), r.cfg.NodeRank, holder, t)
				}
				return fmt.Errorf("%w: %w", errEtcd, watchErr(wr, ok))
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return errRetry
				}
			}
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return setting.Errorf("%w: %s=%d is already taken by node %s in round %d: give each node its own rank", rendezvous.ErrInvalidNode, setting.Name("NodeRank"), r.cfg.NodeRank, holder, t)
		}
	}
}

// joiner waits for one round to close.
type joiner struct {
	r      *Rendezvous
	ctx    context.Context
	target int
	c      *control
	// joinRev is the create revision of this node's join key.
	joinRev int64

	// closer is true while this node counts the others and closes the
	// round: it holds ctl/closer/<target>. closerID names the node that
	// does, for the waiting notes.
	closer   bool
	closerID string
	members  map[string]NodeRecord // the closer's view of join/<target>/
	// askers counts the members asking for each --node-rank, duplicates
	// the members beyond the first for each.
	askers     map[int]int
	duplicates int
	// seenRev is the revision up to which members is complete.
	seenRev int64
	// previous holds the ids of the previous round's members still alive:
	// read once from prevPrefix, then kept by prevWatch's deletions.
	previous   map[string]bool
	prevPrefix string
	prevWatch  clientv3.WatchChan
	// wctx ends the joiner's watches.
	wctx context.Context
	// lastCall fires when the round may close with fewer than MaxNodes.
	lastCall *time.Timer
}

func (j *joiner) run(wctx context.Context, ctlWatch clientv3.WatchChan) (joined, error) {
	r := j.r
	j.wctx = wctx
	waitNote := time.NewTicker(r.cfg.WaitNoteInterval)
	defer waitNote.Stop()
	defer func() {
		if j.lastCall != nil {
			j.lastCall.Stop()
		}
	}()
	var joinWatch clientv3.WatchChan
	if j.closer {
		var err error
		if joinWatch, err = j.startCounting(wctx); err != nil {
			return joined{}, err
		}
	}
	for {
		if res, done, err := j.check(); done || err != nil {
			return res, err
		}
		var lastCall <-chan time.Time
		if j.lastCall != nil {
			lastCall = j.lastCall.C
		}
		select {
		case wr, ok := <-ctlWatch:
			if !ok || wr.Err() != nil {
				return joined{}, watchErr(wr, ok)
			}
			closerGone := false
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision <= j.c.rev {
					continue // known when the join or the closer's read was
				}
				key := string(ev.Kv.Key)
				switch {
				case key == r.k.closer(j.target) && ev.Type == clientv3.EventTypeDelete:
					closerGone = true
				case key == r.k.closer(j.target):
					var id string
					if r.read(key, ev.Kv.Value, ev.Kv.ModRevision, kindCloser, &id) {
						j.closerID = id
					} else {
						j.c.forged[key] = ev.Kv.ModRevision // deleted by mend: closerGone follows
					}
				case ev.Type == clientv3.EventTypePut:
					r.apply(j.c, key, ev.Kv.Value, ev.Kv.ModRevision)
				}
			}
			if err := j.c.foreignErr(); err != nil {
				return joined{}, err
			}
			if len(j.c.forged) > 0 && !j.c.full {
				// A refused value to put right, by a node that joined by
				// the guards alone: what is right (the counters, from the
				// ends of the rounds) takes a full read, which mends.
				c, _, err := r.readControl(j.ctx)
				if err != nil {
					return joined{}, err
				}
				j.c = c
			}
			r.mend(j.ctx, j.c)
			if j.closer && j.c.round == j.target {
				// The round may have opened after enough nodes were waiting.
				if err := j.maybeClose(false); err != nil {
					return joined{}, err
				}
			}
			if closerGone {
				// The closer left before closing (or its key was a
				// stranger's, or this node's was removed): take its place
				// if first.
				j.closer = false
				if err := j.claim(wctx); err != nil {
					return joined{}, err
				}
				if j.closer {
					var err error
					if joinWatch, err = j.startCounting(wctx); err != nil {
						return joined{}, err
					}
				}
			}
		case wr, ok := <-joinWatch:
			if !ok || wr.Err() != nil {
				return joined{}, watchErr(wr, ok)
			}
			for _, ev := range wr.Events {
				j.applyJoin(ev)
				j.seenRev = max(j.seenRev, ev.Kv.ModRevision)
			}
			if err := j.maybeClose(false); err != nil {
				return joined{}, err
			}
		case wr, ok := <-j.prevWatch:
			if err := j.watchPrevious(wr, ok); err != nil {
				return joined{}, err
			}
		case <-lastCall:
			j.lastCall = nil
			if err := j.maybeClose(true); err != nil {
				return joined{}, err
			}
		case <-waitNote.C:
			j.report()
		case <-wctx.Done():
			return joined{}, wctx.Err()
		}
	}
}

// claim tries to become the round's closer (create-if-absent of the
// closer key under this node's lease).
func (j *joiner) claim(ctx context.Context) error {
	r := j.r
	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(r.k.closer(j.target)), "=", 0)).
		Then(r.put(r.k.closer(j.target), kindCloser, r.id, clientv3.WithLease(r.lease.Load().id))).
		Commit()
	if err != nil {
		return err
	}
	j.closer = resp.Succeeded
	return nil
}

// joined is this node's place in a closed round.
type joined struct {
	rec RoundRecord
	memberRanks
}

// check says whether the wait is over: the round closed (with or without
// this node), moved on, or the job finished.
func (j *joiner) check() (joined, bool, error) {
	c := j.c
	if c.outcome != nil {
		return joined{}, true, outcomeErr(c.outcome)
	}
	if rec, ok := c.closed[j.target]; ok {
		if want := shapeHash(j.r.shape); rec.ShapeHash != want {
			return joined{}, true, fmt.Errorf("%w %s: round %d was closed for a job of shape %s, this node's is %s", rendezvous.ErrShapeMismatch, j.r.cfg.Shape.RunID, j.target, rec.ShapeHash, want)
		}
		if rec.Arrivals != nil {
			if g, member := arrivalRank(rec.Arrivals, j.joinRev); member {
				// Every member has this node's workers and role.
				nproc := j.r.node.LocalWorldSize
				return joined{rec: rec, memberRanks: memberRanks{group: g, base: g * nproc, roleBase: g * nproc, roleWorld: rec.WorldSize}}, true, nil
			}
			j.left(rec)
			return joined{}, true, errRetry
		}
		// The member that reported the record has applied it: a local
		// (serializable) read there is enough. Another member may lag;
		// its answer counts only if it has seen the record too.
		key := j.r.k.rank(j.target, j.r.id)
		resp, err := j.r.cli.Get(j.ctx, key, clientv3.WithSerializable())
		if err == nil && resp.Header.Revision < c.closedRev[j.target] {
			resp, err = j.r.cli.Get(j.ctx, key)
		}
		if err != nil {
			return joined{}, true, etcdFailure(err)
		}
		if len(resp.Kvs) > 0 {
			kv := resp.Kvs[0]
			var rr rankRecord
			if j.r.read(key, kv.Value, kv.ModRevision, kindRanks, &rr) {
				m := rr.ranks()
				if err := checkRank(m, j.r.node.LocalWorldSize, rec); err == nil {
					return joined{rec: rec, memberRanks: m}, true, nil
				}
				j.r.g.Refuse(key, kv.ModRevision, fmt.Sprintf("ranks %+v are not ranks of round %d", rr, j.target))
			}
			// This node's rank is lost: the round cannot run.
			j.r.endRound(j.ctx, j.target, "node "+j.r.id+" has no valid rank in round "+strconv.Itoa(j.target))
			return joined{}, true, errRetry
		}
		// Closed without us (full, or we came too late): wait for the next.
		j.left(rec)
		return joined{}, true, errRetry
	}
	if c.round > j.target {
		return joined{}, true, errRetry
	}
	return joined{}, false, nil
}

// left says that round rec closed without this node, which waits to join
// the next one: as a hot spare when one more node allows no larger round.
func (j *joiner) left(rec RoundRecord) {
	r, sh := j.r, j.r.cfg.Shape
	if sh.spareBeside(rec.Size) {
		r.becameSpare(rec)
		return
	}
	r.cfg.Log.Infof("rendezvous %s: round %d closed with %d nodes without this one; joining round %d", sh.RunID, rec.Round, rec.Size, rec.Round+1)
}

// becameSpare notes that this node waits as a hot spare while round rec
// runs (once per Next).
func (r *Rendezvous) becameSpare(rec RoundRecord) {
	if !r.spareSince.IsZero() {
		return
	}
	r.spareSince = time.Now()
	sh := r.cfg.Shape
	r.cfg.Log.Infof("rendezvous %s: round %d runs with %d nodes, and one more allows no larger round%s; this node waits as a hot spare, and takes a lost node's place", sh.RunID, rec.Round, rec.Size, sh.sizesNote())
}

// report logs the wait at a modest rate.
func (j *joiner) report() {
	r, sh := j.r, j.r.cfg.Shape
	switch {
	case j.c.round < j.target:
		if rec, ok := j.c.closed[j.c.round]; ok && sh.spareBeside(rec.Size) {
			r.cfg.Log.Infof("rendezvous %s: round %d is running with %d nodes; this node waits as a hot spare", sh.RunID, j.c.round, rec.Size)
			break
		}
		r.cfg.Log.Infof("rendezvous %s: round %d is running; waiting to join round %d", sh.RunID, j.c.round, j.target)
	case j.closer:
		ids := make([]string, 0, len(j.members))
		for id := range j.members {
			ids = append(ids, id)
		}
		r.cfg.Log.Infof("rendezvous %s: waiting for nodes: %d of min %d / max %d joined%s: %s", sh.RunID, len(ids), sh.MinNodes, sh.MaxNodes, sh.sizesNote(), strings.Join(ids, ", "))
	default:
		r.cfg.Log.Infof("rendezvous %s: waiting for round %d to close (counted by %s)", sh.RunID, j.target, j.closerID)
	}
}

// watchErr explains why a watch ended.
func watchErr(wr clientv3.WatchResponse, ok bool) error {
	if !ok {
		return fmt.Errorf("%w closed", errWatchBroken)
	}
	return fmt.Errorf("%w: %w", errWatchBroken, wr.Err())
}

// errWatchBroken: a watch ended without its context (the member serving
// it lost its leader, or went away). The store may still be whole: a
// caller that still holds its lease watches again.
var errWatchBroken = errors.New("watch")

// Watches broken while the lease holds are set up again after
// rewatchDelay, doubling up to rewatchMaxDelay.
const (
	rewatchDelay    = 50 * time.Millisecond
	rewatchMaxDelay = time.Second
)

// retryBrokenWatch runs do until it returns something other than a broken
// watch, or ctx (which ends with the lease) ends. do must be safe to run
// again: it reads the state it needs afresh.
func retryBrokenWatch[T any](ctx context.Context, log logrus.FieldLogger, what string, do func() (T, error)) (T, error) {
	delay := rewatchDelay
	for {
		v, err := do()
		if err == nil || !errors.Is(err, errWatchBroken) || ctx.Err() != nil {
			return v, err
		}
		log.Debugf("%s: %v; watching again", what, err)
		if ctxtime.Sleep(ctx, delay) != nil {
			return v, err
		}
		delay = min(2*delay, rewatchMaxDelay)
	}
}

// failUnformed ends a job of a fixed node count that has not formed yet
// when this node, refused (refusal, a shape that differs from the job's),
// cannot join it: without this node the job can never form, and the
// other nodes, told at once through the job's outcome, stop with the
// reason instead of waiting for the join timeout. An elastic job, or one
// that ran a round already, goes on without the refused node.
func (r *Rendezvous) failUnformed(ctx context.Context, c *control, refusal error) {
	var job Shape
	if !errors.Is(refusal, rendezvous.ErrShapeMismatch) || c.shape == nil || json.Unmarshal(c.shape, &job) != nil ||
		job.MinNodes != job.MaxNodes || len(c.closed) > 0 || c.round != 0 {
		return
	}
	outcome := failedOutcome(0, fmt.Sprintf("node %s cannot join the job: %s", r.cfg.Addr, r.cfg.shown(refusal)), 0)
	_, err := r.cli.Txn(ctx).
		If(r.isRound(0), clientv3.Compare(clientv3.CreateRevision(r.k.outcome()), "=", 0)).
		Then(r.put(r.k.outcome(), kindOutcome, outcome)).
		Commit()
	if err != nil {
		r.cfg.Log.Warnf("rendezvous: tell the other nodes why this node cannot join: %v", err)
	}
}
