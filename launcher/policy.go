package launcher

import (
	"fmt"
	"slices"
	"time"
)

// RestartPolicy decides, from facts alone, whether failed workers are
// restarted and after what delay. It never sleeps or touches a process.
type RestartPolicy struct {
	// MaxRestarts is the number of restarts allowed after failures.
	MaxRestarts int
	// NoRestartExitCodes are exit codes that mean "do not retry".
	NoRestartExitCodes []int
	// Backoff is the delay before the first restart; each further restart
	// doubles it, up to BackoffMax. 0 restarts at once.
	Backoff    time.Duration
	BackoffMax time.Duration
}

// Decision is the policy's answer.
type Decision struct {
	Restart bool
	Delay   time.Duration
	// Reason explains the decision in words fit for a log line.
	Reason string
}

// Decide returns what to do after an attempt failed, given how many
// restarts were already made and the exit codes of the workers that failed
// on their own.
func (p RestartPolicy) Decide(restarts int, exitCodes []int) Decision {
	for _, c := range exitCodes {
		if slices.Contains(p.NoRestartExitCodes, c) {
			return Decision{Reason: fmt.Sprintf("exit code %d is listed in --no-restart-on-exit-codes", c)}
		}
	}
	if restarts >= p.MaxRestarts {
		return Decision{Reason: fmt.Sprintf("no restarts left (%d of --max-restarts=%d used)", restarts, p.MaxRestarts)}
	}
	return Decision{
		Restart: true,
		Delay:   p.delay(restarts),
		Reason:  fmt.Sprintf("restart %d of %d", restarts+1, p.MaxRestarts),
	}
}

// delay is the backoff before restart number restarts+1.
func (p RestartPolicy) delay(restarts int) time.Duration {
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
