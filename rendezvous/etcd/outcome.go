package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/rendezvous"
)

// The job's outcome: a node's workers fail (Fail: a restart of every
// node, or the job's failure) or succeed (Succeed: the job succeeds once
// every member of the round has); the outcome's text, and the error Next
// and Succeed return for it.

// outcomeHow is how a job ended.
type outcomeHow string

const (
	outcomeSucceeded outcomeHow = "succeeded"
	outcomePreempted outcomeHow = "preempted" // stopped cleanly on a stop request
	outcomeFailed    outcomeHow = "failed"
)

// outcomeRecord is the job's outcome (ctl/outcome).
type outcomeRecord struct {
	How outcomeHow `json:"how"`
	// Round is the round the job ended in.
	Round int `json:"round"`
	// ExitCode is a failed job's failing node's exit code (0: none, a
	// job that failed before its workers ran).
	ExitCode int    `json:"exit_code,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// valid says whether o is an outcome this gorun writes.
func (o outcomeRecord) valid() bool {
	switch o.How {
	case outcomeSucceeded, outcomePreempted, outcomeFailed:
		return o.Round >= 0 && o.ExitCode >= 0 && o.ExitCode <= 255 && len(o.Reason) <= maxReasonLen+3
	}
	return false
}

// String says the outcome in words, as logs and gorun stop show it.
func (o outcomeRecord) String() string {
	switch o.How {
	case outcomeSucceeded:
		return "succeeded in round " + strconv.Itoa(o.Round)
	case outcomePreempted:
		return "preempted in round " + strconv.Itoa(o.Round) + ": " + o.Reason
	}
	return (&rendezvous.JobFailure{Reason: o.Reason, ExitCode: o.ExitCode}).Text()
}

// outcomeErr turns a finished job's outcome into Next's error.
func outcomeErr(o *outcomeRecord) error {
	switch o.How {
	case outcomeSucceeded:
		return fmt.Errorf("%w: %s", rendezvous.ErrJobSucceeded, o)
	case outcomePreempted:
		return fmt.Errorf("%w: %s", rendezvous.ErrPreempted, o)
	}
	return &rendezvous.JobFailure{Reason: o.Reason, ExitCode: o.ExitCode}
}

// failedOutcome is the outcome of a job that failed in round t for
// reason, with the failing node's exit code (0: none).
func failedOutcome(t int, reason string, exitCode int) outcomeRecord {
	return outcomeRecord{How: outcomeFailed, Round: t, ExitCode: exitCode, Reason: clip(reason)}
}

// roundEnd is why a round ended (ctl/end/N): a failure of workers
// (which spends a restart) or another reason.
type roundEnd struct {
	Failure bool   `json:"failure,omitempty"`
	Reason  string `json:"reason"`
}

// String says why the round ended, as the other nodes' logs show it.
func (e roundEnd) String() string {
	if e.Failure {
		return "failure: " + e.Reason
	}
	return e.Reason
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
	case c.outcome != nil:
		return false, true, outcomeErr(c.outcome)
	case c.round > t:
		return true, true, nil // the round already ended; its restart is counted
	}
	fence := []clientv3.Cmp{
		r.isRound(t),
		r.isRestarts(c.restarts),
	}
	var then []clientv3.Op
	restart = retriable && c.restarts < r.cfg.Shape.MaxRestarts
	if restart {
		then = []clientv3.Op{
			r.putRound(t + 1),
			r.putRestarts(c.restarts + 1),
			r.put(r.k.end(t), kindRoundEnd, roundEnd{Failure: true, Reason: clip(reason)}),
		}
	} else {
		then = []clientv3.Op{r.put(r.k.outcome(), kindOutcome, failedOutcome(t, reason, exitCode))}
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
		case c.outcome != nil && c.outcome.How == outcomeSucceeded:
			return nil
		case c.outcome != nil:
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
			if err := c.foreignErr(); err != nil {
				return err
			}
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
			If(r.isRound(t)).
			Then(r.put(r.k.done(t, r.id), kindDone, how, clientv3.WithLease(lease)),
				clientv3.OpGet(r.k.donePrefix(t), clientv3.WithPrefix(), clientv3.WithCountOnly())).
			Commit()
		if err != nil || put.Succeeded {
			return put, err
		}
		c, _, err := r.readControl(ctx)
		if err != nil {
			return nil, err
		}
		if c.round != t || c.outcome != nil || try >= maxMendRetries {
			return nil, nil
		}
	}
}

// recordOutcome records the outcome of round t, whose members all
// reported: preempted when a stop request is recorded or a member's
// workers stopped on one, else succeeded.
func (r *Rendezvous) recordOutcome(ctx context.Context, t int, stopped bool) error {
	outcome := outcomeRecord{How: outcomeSucceeded, Round: t}
	c, _, err := r.readControl(ctx)
	if err != nil {
		return err
	}
	switch {
	case c.stop != nil:
		outcome = outcomeRecord{How: outcomePreempted, Round: t, Reason: clip(c.stop.Reason)}
	case stopped:
		outcome = outcomeRecord{How: outcomePreempted, Round: t, Reason: "a node's workers stopped on the job's stop request"}
	}
	for try := 0; ; try++ {
		resp, err := r.cli.Txn(ctx).
			If(r.isRound(t), clientv3.Compare(clientv3.CreateRevision(r.k.outcome()), "=", 0)).
			Then(r.put(r.k.outcome(), kindOutcome, outcome)).
			Commit()
		if err != nil || resp.Succeeded || try >= maxMendRetries {
			return err
		}
		// Fenced out: by another node's outcome or the round's end, or by
		// a stranger's round counter, which the read refuses and mends.
		if c, _, err = r.readControl(ctx); err != nil || c.round != t || c.outcome != nil {
			return err
		}
	}
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
		var v string
		ok := r.read(string(kv.Key), kv.Value, kv.ModRevision, kindDone, &v)
		switch {
		case ok && v == doneOK:
			valid++
		case ok && v == doneStopped:
			valid++
			stopped = true
		default:
			r.deleteIfUnchanged(ctx, kv)
		}
	}
	return valid >= members, stopped
}
