package launcher

import (
	"fmt"
	"slices"
	"time"
)

// RestartPolicy holds the restart decisions the agent makes alone, from
// facts: whether a failure is worth retrying, and how long to wait. The
// restart budget (--max-restarts) is kept by the rendezvous, because with
// several nodes it is shared by all of them. It never sleeps or touches a
// process.
type RestartPolicy struct {
	// NoRestartExitCodes are exit codes that mean "do not retry".
	NoRestartExitCodes []int
	// Backoff is the delay before the first restart; each further restart
	// doubles it, up to BackoffMax. 0 restarts at once.
	Backoff    time.Duration
	BackoffMax time.Duration
}

// Retriable reports whether failures with these exit codes may be
// retried, and if not, why.
func (p RestartPolicy) Retriable(exitCodes []int) (bool, string) {
	for _, c := range exitCodes {
		if slices.Contains(p.NoRestartExitCodes, c) {
			return false, fmt.Sprintf("exit code %d is listed in --no-restart-on-exit-codes", c)
		}
	}
	return true, ""
}

// Delay is the backoff before the restart that follows restarts earlier
// ones.
func (p RestartPolicy) Delay(restarts int) time.Duration {
	if p.Backoff <= 0 {
		return 0
	}
	d := p.Backoff
	for range restarts {
		if d >= p.BackoffMax/2 {
			return p.BackoffMax
		}
		d *= 2
	}
	return min(d, p.BackoffMax)
}
