// Package ctxtime holds the timer waits that end early: with a context,
// or with an owner's stop channel.
package ctxtime

import (
	"context"
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
