package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/rendezvous"
)

// The live hang watch of round r, beside the round's keys: each node's
// vote (hangwatch/<r>/quiet/<group rank>, present while none of its
// ranks showed a sign of life for the hang timeout, on its lease), the
// declaration (hangwatch/<r>/hung, written once) and the nodes' evidence
// (hangwatch/<r>/evidence/<group rank>).
func (k keys) hangWatchPrefix(r int) string { return k.root + "hangwatch/" + strconv.Itoa(r) + "/" }
func (k keys) hangVotes(r int) string       { return k.hangWatchPrefix(r) + "quiet/" }
func (k keys) hangDeclared(r int) string    { return k.hangWatchPrefix(r) + "hung" }
func (k keys) hangEvidence(r int) string    { return k.hangWatchPrefix(r) + "evidence/" }

// VoteHang records whether this node's ranks showed no sign of life for
// the hang timeout in round (quiet): its vote key is put, sealed, on its
// lease, or deleted. Call it when the state changes; the vote of a node
// that is lost goes with its lease.
func (r *Rendezvous) VoteHang(ctx context.Context, round rendezvous.Round, quiet bool) error {
	key := r.k.hangVotes(round.Number) + strconv.Itoa(round.GroupRank)
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var err error
	if quiet {
		_, err = r.cli.Put(cctx, key, r.seal(key, kindHangVote, true), clientv3.WithLease(r.lease.Load().id))
	} else {
		_, err = r.cli.Delete(cctx, key)
	}
	if err != nil {
		return fmt.Errorf("hang watch: record this node's vote in etcd: %w", err)
	}
	return nil
}

// DeclareHung declares round hung, once: it returns false when it was
// declared already. A declaration that is not this job's (not sealed
// with its secret) is replaced, so that a stranger cannot keep the job
// from ever being declared hung.
func (r *Rendezvous) DeclareHung(ctx context.Context, round rendezvous.Round, why string) (bool, error) {
	key := r.k.hangDeclared(round.Number)
	d := rendezvous.HangDeclared{ID: fmt.Sprintf("hang-%d-%d", round.Number, time.Now().UnixNano()), By: round.GroupRank, Why: why, At: time.Now()}
	for range maxMendRetries {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := r.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(r.put(key, kindHangDeclared, d)).
			Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			return false, fmt.Errorf("hang watch: declare round %d hung in etcd: %w", round.Number, err)
		}
		if resp.Succeeded {
			return true, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // gone since: try again
		}
		if _, ok := r.g.Open(key, kvs[0].Value, kvs[0].ModRevision); ok {
			return false, nil
		}
		// A stranger's: delete that very revision, then try again.
		cctx, cancel = context.WithTimeout(ctx, callTimeout)
		_, err = r.cli.Txn(cctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)).Then(clientv3.OpDelete(key)).Commit()
		cancel()
		if err != nil {
			return false, fmt.Errorf("hang watch: remove a forged declaration: %w", err)
		}
	}
	return false, fmt.Errorf("hang watch: round %d's declaration was rewritten by a stranger %d times", round.Number, maxMendRetries)
}

// WatchHung delivers round's hang declaration once, when a node makes
// it, then closes; it closes without one when ctx ends. On the round's
// group rank 0 it also counts the nodes' votes and declares the round
// hung when every node of the round is quiet: one node counts, so that
// n quiet nodes cost n watch events, not n² reads.
func (r *Rendezvous) WatchHung(ctx context.Context, round rendezvous.Round) <-chan rendezvous.HangDeclared {
	out := make(chan rendezvous.HangDeclared, 1)
	go func() {
		defer close(out)
		d, err := retryBrokenWatch(ctx, r.cfg.Log, fmt.Sprintf("hang watch of round %d", round.Number), func() (rendezvous.HangDeclared, error) {
			return r.watchHung(ctx, round)
		})
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Log.Warnf("hang watch: the nodes' votes and declarations can no longer be read: %v", err)
			}
			return
		}
		out <- d
	}()
	return out
}

// watchHung reads the declaration and, on group rank 0, the votes, then
// follows both from that revision.
func (r *Rendezvous) watchHung(ctx context.Context, round rendezvous.Round) (rendezvous.HangDeclared, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prefix := r.k.hangWatchPrefix(round.Number)
	declared, votes := r.k.hangDeclared(round.Number), r.k.hangVotes(round.Number)
	gctx, gcancel := context.WithTimeout(wctx, callTimeout)
	vresp, err := r.cli.Get(gctx, votes, clientv3.WithPrefix())
	gcancel()
	if err != nil {
		return rendezvous.HangDeclared{}, err
	}
	rev := vresp.Header.Revision
	quiet := map[int]bool{}
	note := func(key string, value []byte, rev int64, put bool) {
		n, err := strconv.Atoi(strings.TrimPrefix(key, votes))
		if err != nil || n < 0 || n >= round.GroupWorldSize {
			return
		}
		if !put {
			delete(quiet, n)
			return
		}
		var q bool
		if r.read(key, value, rev, kindHangVote, &q) && q {
			quiet[n] = true
		}
	}
	for _, kv := range vresp.Kvs {
		note(string(kv.Key), kv.Value, kv.ModRevision, true)
	}
	gctx, gcancel = context.WithTimeout(wctx, callTimeout)
	dget, err := r.cli.Get(gctx, declared, clientv3.WithRev(rev))
	gcancel()
	if err != nil {
		return rendezvous.HangDeclared{}, err
	}
	for _, kv := range dget.Kvs {
		if d, ok := r.openDeclared(kv); ok {
			return d, nil
		}
	}
	counts := round.GroupRank == 0
	wch := r.cli.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		if counts && len(quiet) >= round.GroupWorldSize {
			counts = false // once: the declaration comes back on the watch
			why := fmt.Sprintf("no rank of any of the %d nodes showed a sign of life", round.GroupWorldSize)
			if _, err := r.DeclareHung(wctx, round, why); err != nil {
				r.cfg.Log.Warnf("%v", err)
				counts = true
			}
		}
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case wr, ok = <-wch:
		case <-wctx.Done():
			return rendezvous.HangDeclared{}, wctx.Err()
		}
		if !ok || wr.Err() != nil {
			return rendezvous.HangDeclared{}, errWatchBroken
		}
		for _, ev := range wr.Events {
			key := string(ev.Kv.Key)
			switch {
			case key == declared && ev.Type == clientv3.EventTypePut:
				if d, ok := r.openDeclared(ev.Kv); ok {
					return d, nil
				}
			case strings.HasPrefix(key, votes):
				note(key, ev.Kv.Value, ev.Kv.ModRevision, ev.Type == clientv3.EventTypePut)
				if ev.Type == clientv3.EventTypeDelete && round.GroupRank == 0 {
					counts = true // a node moved again: count anew
				}
			}
		}
	}
}

func (r *Rendezvous) openDeclared(kv interface {
	GetKey() []byte
	GetValue() []byte
	GetModRevision() int64
}) (rendezvous.HangDeclared, bool) {
	var d rendezvous.HangDeclared
	if !r.read(string(kv.GetKey()), kv.GetValue(), kv.GetModRevision(), kindHangDeclared, &d) || d.ID == "" {
		return d, false
	}
	return d, true
}

// ShareHangEvidence puts this node's evidence of a round declared hung
// and returns every node's, this one's included, as they arrive within
// wait (see shareReports).
func (r *Rendezvous) ShareHangEvidence(ctx context.Context, round rendezvous.Round, evidence []byte, wait time.Duration) ([][]byte, error) {
	return r.shareReports(ctx, round, r.k.hangEvidence(round.Number), kindHangEvidence, evidence, wait)
}
