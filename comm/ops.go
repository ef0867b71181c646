package comm

import (
	"context"
	"fmt"
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// AllReduce reduces t across the ranks, in place.
func (g *Group) AllReduce(t *memory.Tensor, d DType, op ReduceOp) (*Work, error) {
	if err := checkElements("all_reduce", t, d); err != nil {
		return nil, err
	}
	return g.launch(opInfo{"all_reduce", false, d}, func(dl time.Time) error { return g.backend.AllReduce(t, d, op, dl) }, t)
}

// AllGather gathers every rank's in into out (size ranks x in, in rank
// order).
func (g *Group) AllGather(out, in *memory.Tensor) (*Work, error) {
	if out.Size() != in.Size()*int64(g.size) {
		return nil, fmt.Errorf("comm: all_gather: output of %d bytes for %d ranks of %d: want %d", out.Size(), g.size, in.Size(), in.Size()*int64(g.size))
	}
	return g.launch(opInfo{"all_gather", false, Uint8}, func(dl time.Time) error { return g.backend.AllGather(out, in, dl) }, out, in)
}

// ReduceScatter reduces in (size ranks x out) across the ranks and leaves
// this rank's part in out.
func (g *Group) ReduceScatter(out, in *memory.Tensor, d DType, op ReduceOp) (*Work, error) {
	if in.Size() != out.Size()*int64(g.size) || out.Size()%int64(d.Size()) != 0 {
		return nil, fmt.Errorf("comm: reduce_scatter: input of %d bytes for %d ranks of %d %s bytes", in.Size(), g.size, out.Size(), d)
	}
	return g.launch(opInfo{"reduce_scatter", false, d}, func(dl time.Time) error { return g.backend.ReduceScatter(out, in, d, op, dl) }, out, in)
}

// Broadcast copies root's t to every rank.
func (g *Group) Broadcast(t *memory.Tensor, root int) (*Work, error) {
	if root < 0 || root >= g.size {
		return nil, fmt.Errorf("comm: broadcast from rank %d of %d", root, g.size)
	}
	return g.launch(opInfo{"broadcast", false, Uint8}, func(dl time.Time) error { return g.backend.Broadcast(t, root, dl) }, t)
}

// AllToAll sends part p of in to rank p and receives rank p's part for
// this rank in part p of out (equal parts).
func (g *Group) AllToAll(out, in *memory.Tensor) (*Work, error) {
	if in.Size() != out.Size() || in.Size()%int64(g.size) != 0 {
		return nil, fmt.Errorf("comm: all_to_all: %d and %d bytes: want equal sizes, a multiple of %d ranks", in.Size(), out.Size(), g.size)
	}
	return g.launch(opInfo{"all_to_all", false, Uint8}, func(dl time.Time) error { return g.backend.AllToAll(out, in, dl) }, out, in)
}

// Send sends t to rank peer.
func (g *Group) Send(t *memory.Tensor, peer int) (*Work, error) {
	if peer < 0 || peer >= g.size || peer == g.rank {
		return nil, fmt.Errorf("comm: send to rank %d of %d (this is rank %d)", peer, g.size, g.rank)
	}
	return g.launch(opInfo{"send", true, Uint8}, func(dl time.Time) error { return g.backend.Send(t, peer, dl) }, t)
}

// Recv receives into t from rank peer.
func (g *Group) Recv(t *memory.Tensor, peer int) (*Work, error) {
	if peer < 0 || peer >= g.size || peer == g.rank {
		return nil, fmt.Errorf("comm: receive from rank %d of %d (this is rank %d)", peer, g.size, g.rank)
	}
	return g.launch(opInfo{"recv", true, Uint8}, func(dl time.Time) error { return g.backend.Recv(t, peer, dl) }, t)
}

// Barrier completes when every rank has entered it.
func (g *Group) Barrier() (*Work, error) {
	return g.launch(opInfo{"barrier", false, Uint8}, g.backend.Barrier)
}

// Sync waits for a launched operation: the synchronous form of every
// collective, as in `Sync(ctx)(g.AllReduce(t, Float32, Sum))`.
func Sync(ctx context.Context) func(*Work, error) error {
	return func(w *Work, err error) error {
		if err != nil {
			return err
		}
		return w.Wait(ctx)
	}
}

func checkElements(name string, t *memory.Tensor, d DType) error {
	if t.Size()%int64(d.Size()) != 0 {
		return fmt.Errorf("comm: %s: %d bytes is not a whole number of %s elements", name, t.Size(), d)
	}
	return nil
}
