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

// outcomeErr turns a finished job's outcome into Next's error.
func outcomeErr(outcome string) error {
	if strings.HasPrefix(outcome, "succeeded") {
		return fmt.Errorf("%w: %s", rendezvous.ErrJobSucceeded, outcome)
	}
	if strings.HasPrefix(outcome, preemptedPrefix) {
		return fmt.Errorf("%w: %s", rendezvous.ErrPreempted, outcome)
	}
	return &rendezvous.JobFailure{Outcome: outcome, ExitCode: outcomeExitCode(outcome)}
}

// failedPrefix begins the outcome of a job that failed.
const failedPrefix = "failed: "

// exitCodePrefix follows failedPrefix in the outcome of a job whose
// workers failed: "failed: exit code 3: rank 1 on ...".
const exitCodePrefix = "exit code "

// failedOutcome is the outcome of a job that failed for reason, with the
// failing node's exit code (0: none).
func failedOutcome(reason string, exitCode int) string {
	if exitCode > 0 {
		return failedPrefix + exitCodePrefix + strconv.Itoa(exitCode) + ": " + reason
	}
	return failedPrefix + reason
}

// outcomeExitCode is the exit code a failed outcome carries, 0 if none.
func outcomeExitCode(outcome string) int {
	rest, ok := strings.CutPrefix(outcome, failedPrefix+exitCodePrefix)
	if !ok {
		return 0
	}
	num, _, ok := strings.Cut(rest, ":")
	code, err := strconv.Atoi(num)
	if !ok || err != nil || code < 1 || code > 255 {
		return 0
	}
	return code
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

// allDone reports whether at least members of the done keys of round t
// are this job's; the others are removed.
func (r *Rendezvous) allDone(ctx context.Context, t, members int) (done, stopped bool) {
	resp, err := r.cli.Get(ctx, r.k.donePrefix(t), clientv3.WithPrefix())
	if err != nil {
		return false, false
	}
	valid := 0
	for _, kv := range resp.Kvs {
		v, ok := r.g.Open(string(kv.Key), kv.Value, kv.ModRevision)
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
