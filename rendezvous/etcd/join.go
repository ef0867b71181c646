package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// control is what an agent knows of the job's control keys.
type control struct {
	round    int
	restarts int
	outcome  string
	closed   map[int]RoundRecord
}

// apply records one control key's new value.
func (c *control) apply(k keys, key string, value []byte) {
	switch {
	case key == k.round():
		c.round = atoi(value)
	case key == k.restarts():
		c.restarts = atoi(value)
	case key == k.outcome():
		c.outcome = string(value)
	case strings.HasPrefix(key, k.ctl()+"closed/"):
		var rec RoundRecord
		if json.Unmarshal(value, &rec) == nil {
			c.closed[rec.Round] = rec
		}
	}
}

// readControl reads every control key at one revision.
func (r *Rendezvous) readControl(ctx context.Context) (*control, int64, error) {
	resp, err := r.cli.Get(ctx, r.k.ctl(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	c := &control{round: -1, closed: map[int]RoundRecord{}}
	for _, kv := range resp.Kvs {
		c.apply(r.k, string(kv.Key), kv.Value)
	}
	return c, resp.Header.Revision, nil
}

// outcomeErr turns a finished job's outcome into Next's error.
func outcomeErr(outcome string) error {
	if strings.HasPrefix(outcome, "succeeded") {
		return fmt.Errorf("%w: %s", ErrJobSucceeded, outcome)
	}
	return fmt.Errorf("%w: %s", ErrJobFailed, outcome)
}

// join runs one attempt to join a round: it puts this node's join key
// (fenced by the round counter) and waits until the round closes. It
// returns errRetry when the round moved on before closing.
func (r *Rendezvous) join(ctx context.Context, me NodeRecord) (RoundRecord, error) {
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	// Watch first, then read: a watch from the current revision starts at
	// once, while one from a past revision waits for etcd's catch-up.
	ctlWatch := r.cli.Watch(clientv3.WithRequireLeader(wctx), r.k.ctl(), clientv3.WithPrefix())
	c, _, err := r.readControl(ctx)
	if err != nil {
		return RoundRecord{}, fmt.Errorf("%w: %w", errEtcd, err)
	}
	if c.outcome != "" {
		return RoundRecord{}, outcomeErr(c.outcome)
	}
	target := c.round
	if _, running := c.closed[target]; running {
		target++ // the round runs without us: wait to join the next one
	}
	val, err := marshal(me)
	if err != nil {
		return RoundRecord{}, err
	}
	put, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(r.k.round()), "=", strconv.Itoa(c.round))).
		Then(clientv3.OpPut(r.k.join(target, r.id), val, clientv3.WithLease(r.session.Lease()), clientv3.WithPrevKV())).
		Commit()
	if err != nil {
		return RoundRecord{}, fmt.Errorf("%w: %w", errEtcd, err)
	}
	if !put.Succeeded {
		return RoundRecord{}, errRetry
	}
	// This node's place in the round is its key's create revision, which
	// is older than this put when it rejoins after a retry.
	myRev := put.Header.Revision
	if prev := put.Responses[0].GetResponsePut().GetPrevKv(); prev != nil {
		myRev = prev.CreateRevision
	}
	j := &joiner{r: r, ctx: ctx, target: target, myRev: myRev, c: c}
	return j.run(wctx, ctlWatch)
}

// joiner waits for one round to close.
type joiner struct {
	r      *Rendezvous
	ctx    context.Context
	target int
	myRev  int64
	c      *control

	// closer is true while this node is the oldest joiner of the round: it
	// counts the others and closes the round.
	closer  bool
	members map[string]NodeRecord // the closer's view of join/<target>/
	// lastCall fires when the round may close with fewer than MaxNodes.
	lastCall *time.Timer
}

func (j *joiner) run(wctx context.Context, ctlWatch clientv3.WatchChan) (RoundRecord, error) {
	r := j.r
	progress := time.NewTicker(r.cfg.ProgressInterval)
	defer progress.Stop()
	defer func() {
		if j.lastCall != nil {
			j.lastCall.Stop()
		}
	}()
	var joinWatch clientv3.WatchChan
	pred, predWatch, err := j.elect(wctx)
	if err != nil {
		return RoundRecord{}, err
	}
	if j.closer {
		joinWatch, err = j.startCounting(wctx)
		if err != nil {
			return RoundRecord{}, err
		}
	}
	for {
		if rec, done, err := j.check(); done || err != nil {
			return rec, err
		}
		var lastCall <-chan time.Time
		if j.lastCall != nil {
			lastCall = j.lastCall.C
		}
		select {
		case wr, ok := <-ctlWatch:
			if !ok || wr.Err() != nil {
				return RoundRecord{}, watchErr(wr, ok)
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					j.c.apply(r.k, string(ev.Kv.Key), ev.Kv.Value)
				}
			}
		case wr, ok := <-predWatch:
			if !ok || wr.Err() != nil {
				return RoundRecord{}, watchErr(wr, ok)
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					// The node ahead of us left: find the new one, or
					// become the closer.
					if pred, predWatch, err = j.elect(wctx); err != nil {
						return RoundRecord{}, err
					}
					if j.closer && joinWatch == nil {
						if joinWatch, err = j.startCounting(wctx); err != nil {
							return RoundRecord{}, err
						}
					}
				}
			}
		case wr, ok := <-joinWatch:
			if !ok || wr.Err() != nil {
				return RoundRecord{}, watchErr(wr, ok)
			}
			for _, ev := range wr.Events {
				j.applyJoin(ev)
			}
			if err := j.maybeClose(false); err != nil {
				return RoundRecord{}, err
			}
		case <-lastCall:
			j.lastCall = nil
			if err := j.maybeClose(true); err != nil {
				return RoundRecord{}, err
			}
		case <-progress.C:
			j.report(pred)
		case <-wctx.Done():
			return RoundRecord{}, wctx.Err()
		}
	}
}

// check says whether the wait is over: the round closed (with or without
// this node), moved on, or the job finished.
func (j *joiner) check() (RoundRecord, bool, error) {
	c := j.c
	if c.outcome != "" {
		return RoundRecord{}, true, outcomeErr(c.outcome)
	}
	if rec, ok := c.closed[j.target]; ok {
		for _, m := range rec.Members {
			if m.ID == j.r.id {
				return rec, true, nil
			}
		}
		// Closed without us (full, or we came too late): wait for the next.
		return RoundRecord{}, true, errRetry
	}
	if c.round > j.target {
		return RoundRecord{}, true, errRetry
	}
	return RoundRecord{}, false, nil
}

// elect finds the join key created just before ours; with none, this node
// is the closer. It returns a watch on that key's deletion.
func (j *joiner) elect(ctx context.Context) (string, clientv3.WatchChan, error) {
	r := j.r
	opts := append([]clientv3.OpOption{clientv3.WithMaxCreateRev(j.myRev - 1)}, clientv3.WithLastCreate()...)
	resp, err := r.cli.Get(ctx, r.k.joinPrefix(j.target), opts...)
	if err != nil {
		return "", nil, err
	}
	if len(resp.Kvs) == 0 {
		j.closer = true
		return "", nil, nil
	}
	pred := string(resp.Kvs[0].Key)
	w := r.cli.Watch(clientv3.WithRequireLeader(ctx), pred, clientv3.WithRev(resp.Header.Revision+1))
	return strings.TrimPrefix(pred, r.k.joinPrefix(j.target)), w, nil
}

// startCounting makes this node the round's closer: it reads every join
// key and watches for more.
func (j *joiner) startCounting(ctx context.Context) (clientv3.WatchChan, error) {
	r := j.r
	resp, err := r.cli.Get(ctx, r.k.joinPrefix(j.target), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	j.members = map[string]NodeRecord{}
	for _, kv := range resp.Kvs {
		j.applyJoin(&clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
	}
	w := r.cli.Watch(clientv3.WithRequireLeader(ctx), r.k.joinPrefix(j.target), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	return w, j.maybeClose(false)
}

// applyJoin updates the closer's view of the joined nodes.
func (j *joiner) applyJoin(ev *clientv3.Event) {
	id := strings.TrimPrefix(string(ev.Kv.Key), j.r.k.joinPrefix(j.target))
	if ev.Type == clientv3.EventTypeDelete {
		delete(j.members, id)
		return
	}
	var n NodeRecord
	if json.Unmarshal(ev.Kv.Value, &n) == nil {
		n.Revision = ev.Kv.CreateRevision
		j.members[id] = n
	}
}

// maybeClose applies the closing rules: MaxNodes joined closes at once;
// MinNodes joined starts the last call, and closes when it ends or when
// every member of the previous round is back (a restart of the same
// nodes need not wait).
func (j *joiner) maybeClose(lastCallOver bool) error {
	sh := j.r.cfg.Shape
	n := len(j.members)
	switch {
	case n >= sh.MaxNodes, n >= sh.MinNodes && (lastCallOver || j.previousAllBack()):
		return j.close()
	case n >= sh.MinNodes && j.lastCall == nil:
		j.lastCall = time.NewTimer(j.r.cfg.LastCallTimeout)
	case n < sh.MinNodes && j.lastCall != nil:
		j.lastCall.Stop()
		j.lastCall = nil
	}
	return nil
}

// previousAllBack reports whether every member of the previous round has
// joined this one (agents keep their id across rounds).
func (j *joiner) previousAllBack() bool {
	prev, ok := j.c.closed[j.target-1]
	if !ok {
		return false
	}
	for _, m := range prev.Members {
		if _, back := j.members[m.ID]; !back {
			return false
		}
	}
	return true
}

// close writes the round's record, once: only while the round counter
// still says this round, only if no record exists, and only if every
// member's join key is still the one counted.
func (j *joiner) close() error {
	r := j.r
	nodes := make([]NodeRecord, 0, len(j.members))
	for _, n := range j.members {
		nodes = append(nodes, n)
	}
	ordered := orderMembers(nodes)
	if len(ordered) > r.cfg.Shape.MaxNodes {
		ordered = ordered[:r.cfg.Shape.MaxNodes] // the rest wait for the next round
	}
	rec := RoundRecord{Round: j.target, Members: ordered, MasterAddr: ordered[0].Addr, MasterPort: ordered[0].MasterPort, Restarts: j.c.restarts}
	val, err := marshal(rec)
	if err != nil {
		return err
	}
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(r.k.round()), "=", strconv.Itoa(j.target)),
		clientv3.Compare(clientv3.CreateRevision(r.k.closed(j.target)), "=", 0),
	}
	for _, m := range ordered {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(r.k.join(j.target, m.ID)), "=", m.Revision))
	}
	_, err = r.cli.Txn(j.ctx).If(cmps...).Then(clientv3.OpPut(r.k.closed(j.target), val)).Commit()
	// Whether this txn or another won, the record arrives on the control
	// watch; a lost race needs nothing more.
	return err
}

// report logs the wait at a modest rate.
func (j *joiner) report(pred string) {
	r, sh := j.r, j.r.cfg.Shape
	switch {
	case j.c.round < j.target:
		r.cfg.Log.Infof("rendezvous %s: round %d is running; waiting to join round %d", sh.RunID, j.c.round, j.target)
	case j.closer:
		ids := make([]string, 0, len(j.members))
		for id := range j.members {
			ids = append(ids, id)
		}
		r.cfg.Log.Infof("rendezvous %s: waiting for nodes: %d of min %d / max %d joined: %s", sh.RunID, len(ids), sh.MinNodes, sh.MaxNodes, strings.Join(ids, ", "))
	default:
		r.cfg.Log.Infof("rendezvous %s: waiting for round %d to close (counted by the node before this one, %s)", sh.RunID, j.target, pred)
	}
}

// watchErr explains why a watch ended.
func watchErr(wr clientv3.WatchResponse, ok bool) error {
	if !ok {
		return fmt.Errorf("watch closed")
	}
	return fmt.Errorf("watch: %w", wr.Err())
}
