package rendezvous

import (
	"context"
	"sync"

	"github.com/gorun-dev/gorun/internal/setting"
)

// counter is the state of a rendezvous kept on this node alone: the round
// number, the restart budget, and whether it is closed. Local and Static
// share it.
type counter struct {
	mu          sync.Mutex
	round       int
	restarts    int
	maxRestarts int
	closed      bool
}

// nextRound numbers a new round and returns it with the restart count.
func (c *counter) nextRound() (number, restarts int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, 0, ErrClosed
	}
	n := c.round
	c.round++
	return n, c.restarts, nil
}

// Fail records a failure of this node's workers and says whether they may
// restart: the failure must be retriable and a restart left.
func (c *counter) Fail(_ context.Context, _ Round, _ string, _ int, retriable bool) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !retriable || c.restarts >= c.maxRestarts {
		return false, nil
	}
	c.restarts++
	return true, nil
}

// Succeed returns at once: with one node, or static nodes that do not
// observe each other, this node's success is all there is to wait for.
func (c *counter) Succeed(context.Context, Round) error { return nil }

// Watch returns nil: nothing outside this node ends its rounds, and
// receiving from a nil channel blocks forever.
func (c *counter) Watch(context.Context, Round) <-chan Event { return nil }

// Close ends the rendezvous; later calls to Next return ErrClosed. It is
// safe to call more than once.
func (c *counter) Close(context.Context) error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

func checkMaxRestarts(n int) error {
	if n < 0 {
		return setting.Errorf("rendezvous: %s %d, want 0 or more", setting.Name("MaxRestarts"), n)
	}
	return nil
}
