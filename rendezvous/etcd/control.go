package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/rendezvous"
)

// control is what an agent knows of the job's control keys: only values
// that this job sealed and that pass their range checks count.
type control struct {
	round    int
	restarts int
	outcome  *outcomeRecord
	// stop is the job's stop request, once one is recorded.
	stop *rendezvous.StopRequest
	// shape is the job's recorded shape (nil before the first node);
	// jobShape the same, read, by which its records are checked (a node
	// of another shape must not refuse, and mend, the job's own).
	shape    []byte
	jobShape *Shape
	closed   map[int]RoundRecord
	// closedRev is the revision at which each round closed.
	closedRev map[int]int64
	// ends holds why each ended round ended (ctl/end/<r>): the round
	// counter is one past the last, the restart counter the number of
	// failures among them, which is how a forged counter is mended.
	ends map[int]roundEnd
	// foreign is the first record sealed with this job's secret but of
	// another version than this gorun's (a node runs another release):
	// refused, and never mended, for the other release would mend it
	// back; this node cannot take part in the job (foreignErr).
	foreign error
	// foreignKeys are the keys of such records, which settle and mend
	// leave alone.
	foreignKeys map[string]bool
	// good is the last accepted raw value of each key, to put back in
	// place of a refused one; forged lists the keys whose current value
	// was refused, with the revision it was written at.
	good   map[string]string
	forged map[string]int64
	// roundRev and restartsRev are the counters' revisions, to fence the
	// mending of one that is behind.
	roundRev, restartsRev int64
	// full is set when every control key was read (applyKVs); a join by
	// the guarded transaction alone knows the round and the shape only.
	full bool
	// rev is the revision this knowledge is of: a watch event at or
	// before it is old news (applied again, an older counter would be
	// refused as behind).
	rev int64
}

// newControl returns what is known of the control keys before reading
// them.
func newControl() *control {
	return &control{round: -1, closed: map[int]RoundRecord{}, closedRev: map[int]int64{},
		ends: map[int]roundEnd{}, good: map[string]string{}, forged: map[string]int64{}, foreignKeys: map[string]bool{}}
}

// jobExists says whether c holds a sign of a job that it sealed: its
// round counter, a round's record, or a round's end.
func (c *control) jobExists() bool {
	return c.round >= 0 || len(c.closed) > 0 || len(c.ends) > 0
}

// ctlIndex returns r for key = prefix + r.
func ctlIndex(key, prefix string) (int, bool) {
	s, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0 && strconv.Itoa(n) == s
}

// apply records one control key's value, written at revision rev, if it
// is this job's and in range; otherwise the key is marked for mending.
func (r *Rendezvous) apply(c *control, key string, value []byte, rev int64) {
	if key == r.k.token() {
		return // the job's secret when no token was given: see New
	}
	payload, ok := r.g.Open(key, value, rev)
	if !ok {
		c.forged[key] = rev
		return
	}
	refuse := func(why string) {
		r.g.Refuse(key, rev, why)
		c.forged[key] = rev
	}
	// decode reads the record, refusing one that is not of kind; one of
	// another release is refused and kept.
	decode := func(kind recordKind, out any) bool {
		err := decodeRecord(payload, kind, out)
		var foreign *recordVersionError
		switch {
		case errors.As(err, &foreign):
			r.g.Refuse(key, rev, err.Error())
			if c.foreign == nil {
				c.foreign = fmt.Errorf("rendezvous: %s: %w", key, err)
			}
			c.foreignKeys[key] = true
			return false
		case err != nil:
			refuse(err.Error())
			return false
		}
		return true
	}
	ctl := r.k.ctl()
	switch {
	case key == r.k.round():
		var n int
		if !decode(kindRoundCounter, &n) {
			return
		}
		if n < 0 || n < c.round {
			refuse("round " + strconv.Itoa(n) + " is not a round number at or past " + strconv.Itoa(max(c.round, 0)))
			return
		}
		c.round, c.roundRev = n, rev
	case key == r.k.restarts():
		var n int
		if !decode(kindRestarts, &n) {
			return
		}
		if n < 0 || n > r.shapeOf(c).MaxRestarts || n < c.restarts {
			refuse("restart count " + strconv.Itoa(n) + " is out of range")
			return
		}
		c.restarts, c.restartsRev = n, rev
	case key == r.k.stop():
		var req rendezvous.StopRequest
		if !decode(kindStop, &req) {
			return
		}
		req, err := checkStop(req)
		if err != nil {
			refuse(err.Error())
			return
		}
		c.stop = &req
	case key == r.k.outcome():
		var o outcomeRecord
		if !decode(kindOutcome, &o) {
			return
		}
		if !o.valid() {
			refuse("not an outcome of gorun's")
			return
		}
		c.outcome = &o
	case key == r.k.shape():
		var shape json.RawMessage
		if !decode(kindShape, &shape) {
			return
		}
		c.shape = shape
		var job Shape
		if json.Unmarshal(shape, &job) == nil {
			c.jobShape = &job
		}
		r.trusted.Store(true)
	case strings.HasPrefix(key, ctl+"closed/"):
		t, ok := ctlIndex(key, ctl+"closed/")
		if !ok {
			refuse("not a round's key")
			return
		}
		var rec RoundRecord
		if !decode(kindClosed, &rec) {
			return
		}
		if err := checkRound(rec, t, r.shapeOf(c)); err != nil {
			refuse(err.Error())
			return
		}
		c.closed[t], c.closedRev[t] = rec, rev
	case strings.HasPrefix(key, ctl+"end/"):
		t, ok := ctlIndex(key, ctl+"end/")
		if !ok {
			refuse("not a round's key")
			return
		}
		var end roundEnd
		if !decode(kindRoundEnd, &end) {
			return
		}
		c.ends[t] = end
	case strings.HasPrefix(key, ctl+"closer/"):
		if _, ok := ctlIndex(key, ctl+"closer/"); !ok {
			refuse("not a round's key")
			return
		}
		// Closer keys are read where they are used (join).
	default:
		refuse("not a control key of gorun's")
		return
	}
	c.good[key] = string(value)
}

// shapeOf is the shape by which c's records are checked: the job's, as
// recorded, or this node's before it is read.
func (r *Rendezvous) shapeOf(c *control) Shape {
	if c.jobShape != nil {
		return *c.jobShape
	}
	return r.cfg.Shape
}

// settle mends the counters after a full read of the control keys: the
// round counter is one past the last ended round, the restart counter
// the number of failures among the ended rounds. A counter that is behind
// (an old sealed value put back) or was refused takes those values.
func (r *Rendezvous) settle(c *control) {
	if c.shape == nil {
		return // no job yet
	}
	next, failures := 0, 0
	for t, end := range c.ends {
		next = max(next, t+1)
		if end.Failure {
			failures++
		}
	}
	// A round's record holds the restart count it closed with: a lower
	// bound that deleting ends of rounds does not lower.
	for t, rec := range c.closed {
		next, failures = max(next, t), max(failures, rec.Restarts)
	}
	if c.foreignKeys[r.k.round()] || c.foreignKeys[r.k.restarts()] {
		return // another release's counters: this node stops (foreignErr), and mends nothing
	}
	if _, forged := c.forged[r.k.round()]; forged || c.round < next {
		if !forged {
			c.forged[r.k.round()] = c.roundRev
		}
		c.round = next
	}
	if _, forged := c.forged[r.k.restarts()]; forged || c.restarts < failures {
		if !forged {
			c.forged[r.k.restarts()] = c.restartsRev
		}
		c.restarts = failures
	}
}

// applyKVs records a full read of the control keys.
func (r *Rendezvous) applyKVs(ctx context.Context, c *control, kvs []*mvccpb.KeyValue) {
	c.full = true
	// The shape first (it sorts last): the other records are checked by
	// it.
	shape := r.k.shape()
	for _, kv := range kvs {
		if string(kv.Key) == shape {
			r.apply(c, shape, kv.Value, kv.ModRevision)
		}
	}
	for _, kv := range kvs {
		if string(kv.Key) != shape {
			r.apply(c, string(kv.Key), kv.Value, kv.ModRevision)
		}
	}
	if c.shape == nil && c.jobExists() {
		r.putShapeBack(ctx, c)
	}
	r.settle(c)
	r.mend(ctx, c)
}

// applyEvents records the control keys that a watch reports written
// after c's revision.
func (r *Rendezvous) applyEvents(ctx context.Context, c *control, events []*clientv3.Event) {
	for _, ev := range events {
		if ev.Type == clientv3.EventTypePut && ev.Kv.ModRevision > c.rev {
			r.apply(c, string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision)
		}
	}
	r.mend(ctx, c)
}

// mend puts back, in place of each refused value, the last value this
// agent accepted there (the counters' derived values), or deletes it: a
// refused outcome or round record would otherwise block the job's own.
// Each write is fenced by the refused value's revision (0: any), so a
// newer write wins. Errors are left to the next read to surface.
func (r *Rendezvous) mend(ctx context.Context, c *control) {
	if !r.trusted.Load() || len(c.forged) == 0 {
		return
	}
	if c.jobShape != nil && r.cfg.Shape.Diff(*c.jobShape) != nil {
		return // not this node's job to mend: it is refused (checkShape)
	}
	for key, rev := range c.forged {
		delete(c.forged, key)
		var op clientv3.Op
		switch {
		case key == r.k.round():
			op = r.putRound(c.round)
		case key == r.k.restarts():
			op = r.putRestarts(c.restarts)
		case strings.HasPrefix(key, r.k.ctl()+"closer/"):
			op = clientv3.OpDelete(key) // a lease-less closer would stall the round
		case c.good[key] != "":
			op = clientv3.OpPut(key, c.good[key])
		default:
			// The value the stranger's replaced, from etcd's history.
			if prev := r.previousValue(ctx, key, rev); prev != nil {
				op = clientv3.OpPut(key, string(prev.Value))
				r.apply(c, key, prev.Value, prev.ModRevision)
				break
			}
			op = clientv3.OpDelete(key)
		}
		if r.ifUnchanged(ctx, key, rev, op) {
			r.cfg.Log.Warnf("rendezvous: mended %s", key)
		}
	}
}

// ifUnchanged applies op to key if key's value is still the one of
// revision rev (0: whatever it is), and reports whether it did.
func (r *Rendezvous) ifUnchanged(ctx context.Context, key string, rev int64, op clientv3.Op) bool {
	txn := r.cli.Txn(ctx)
	if rev > 0 {
		txn = txn.If(clientv3.Compare(clientv3.ModRevision(key), "=", rev))
	}
	resp, err := txn.Then(op).Commit()
	return err == nil && resp.Succeeded
}

// previousValue returns the value key had before revision rev, if it was
// this job's (nil if none, or etcd compacted it away).
func (r *Rendezvous) previousValue(ctx context.Context, key string, rev int64) *mvccpb.KeyValue {
	if rev <= 1 {
		return nil
	}
	resp, err := r.cli.Get(ctx, key, clientv3.WithRev(rev-1))
	if err != nil || len(resp.Kvs) == 0 {
		return nil
	}
	kv := resp.Kvs[0]
	if _, ok := r.g.Open(key, kv.Value, kv.ModRevision); !ok {
		return nil
	}
	return kv
}

// readControl reads every control key at one revision.
func (r *Rendezvous) readControl(ctx context.Context) (*control, int64, error) {
	resp, err := r.cli.Get(ctx, r.k.ctl(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	c := newControl()
	c.rev = resp.Header.Revision
	r.applyKVs(ctx, c, resp.Kvs)
	if err := c.foreignErr(); err != nil {
		return nil, 0, err
	}
	return c, resp.Header.Revision, nil
}

// foreignErr is this node's refusal to take part in a job that a node of
// another release writes to (a record of another version), nil if none.
// Waiting would be for ever: the two read none of each other's records.
func (c *control) foreignErr() error {
	if c.foreign == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", rendezvous.ErrShapeMismatch, c.foreign)
}
