package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
)

// RetryOverload runs call again while etcd refuses it for too many
// requests (its apply more than 5,000 entries behind its log: thousands
// of a job's nodes arriving at once at a loaded store) or gives up on it
// for want of time to commit it, backing off from 10 ms to 1 s, for up to
// limit; then, or on any other error, it returns call's error. A node
// that gave up there would end a job that the store carries a second
// later. call must be safe to repeat (a timed-out call may have been
// applied): a lease grant, a put of the same value.
func RetryOverload(ctx context.Context, limit time.Duration, call func() error) error {
	deadline := time.Now().Add(limit)
	delay := 10 * time.Millisecond
	for {
		err := call()
		if !overloaded(err) || time.Now().Add(delay).After(deadline) {
			return err
		}
		if ctxtime.Sleep(ctx, delay) != nil {
			return err
		}
		delay = min(2*delay, time.Second)
	}
}

// overloaded says whether err is etcd too busy to take or commit a call.
func overloaded(err error) bool {
	return errors.Is(err, rpctypes.ErrTooManyRequests) || errors.Is(err, rpctypes.ErrTimeout)
}
