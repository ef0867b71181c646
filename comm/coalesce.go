package comm

import (
	"errors"
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// coalescer gathers the operations launched between StartCoalescing and
// EndCoalescing.
type coalescer struct {
	names   []string
	fns     []func(time.Time) error
	works   []*Work
	tensors []*memory.Tensor
}

func (c *coalescer) add(name string, fn func(time.Time) error, tensors []*memory.Tensor) *Work {
	w := &Work{done: make(chan struct{})}
	c.names = append(c.names, name)
	c.fns = append(c.fns, fn)
	c.works = append(c.works, w)
	c.tensors = append(c.tensors, tensors...)
	return w
}

// StartCoalescing begins a block: the operations launched until
// EndCoalescing run as one, on one Work for the reuse engine (PyTorch's
// coalescing manager); each returns its own Work, which completes with
// the block.
func (g *Group) StartCoalescing() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.coal != nil {
		return errors.New("comm: StartCoalescing inside a coalescing block")
	}
	g.coal = &coalescer{}
	return nil
}

// EndCoalescing launches the block's operations, in order, as one
// operation, and returns its Work.
func (g *Group) EndCoalescing() (*Work, error) {
	g.mu.Lock()
	c := g.coal
	g.coal = nil
	g.mu.Unlock()
	if c == nil {
		return nil, errors.New("comm: EndCoalescing without StartCoalescing")
	}
	all, err := g.launch(opInfo{"coalesced", false, Uint8}, func(dl time.Time) error {
		var first error
		for i, fn := range c.fns {
			err := first
			if err == nil {
				err = fn(dl)
				first = err
			}
			c.works[i].err = err
			close(c.works[i].done)
		}
		return first
	}, c.tensors...)
	if err != nil {
		return nil, err
	}
	for _, w := range c.works {
		w.g, w.mw = g, all.mw
	}
	return all, nil
}
