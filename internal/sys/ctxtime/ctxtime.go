// Package ctxtime holds the timer waits that end early: with a context,
// or with an owner's stop channel.
package ctxtime

import (
	"context"
	"fmt"
	"time"
)

// Sleep waits d, or until ctx ends: then it returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SleepUnless waits d, or until done is closed (an owner's stop channel,
// where there is no context); it says whether all of d passed.
func SleepUnless(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// AcceptBackoff is the wait after an accept that failed for a reason
// that passes (EMFILE, ENFILE, an aborted connection), as net/http's
// server waits: 5 ms, doubling up to 1 s, back to 5 ms after an accept
// that succeeds. A listener's loop that returned at its first error
// would stop for good under a flood of connections.
type AcceptBackoff struct{ d time.Duration }

// Wait waits out the next step, or until done is closed; it says whether
// the whole wait passed.
func (b *AcceptBackoff) Wait(done <-chan struct{}) bool {
	b.d = min(max(2*b.d, 5*time.Millisecond), time.Second)
	return SleepUnless(done, b.d)
}

// Reset starts the steps over, after an accept that succeeded.
func (b *AcceptBackoff) Reset() { b.d = 0 }

// Poll checks cond every interval until it holds, limit passes or ctx
// ends; it returns nil once cond held.
func Poll(ctx context.Context, interval, limit time.Duration, cond func() bool) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			return fmt.Errorf("not within %v", limit)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
