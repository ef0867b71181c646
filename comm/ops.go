package comm

import (
	"context"
	"fmt"
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// chunk is the byte range of chunk i of n elements of size es split in w.
func chunk(i, n, w, es int) (int, int) {
	i = ((i % w) + w) % w
	return i * n / w * es, (i + 1) * n / w * es
}

// AllReduce reduces t across the ranks, in place: a ring reduce-scatter
// then a ring all-gather.
func (g *Group) AllReduce(t *memory.Tensor, d DType, op ReduceOp) (*Work, error) {
	buf, err := checkTensor("all_reduce", t, d)
	if err != nil {
		return nil, err
	}
	return g.launch("all_reduce", false, func(dl time.Time) error { return g.ringAllReduce(buf, d, op, dl) }, t)
}

func (g *Group) ringAllReduce(buf []byte, d DType, op ReduceOp, dl time.Time) error {
	w, r, es := g.size, g.rank, d.Size()
	n := len(buf) / es
	if w > 1 {
		next, prev := (r+1)%w, (r-1+w)%w
		for s := range w - 1 {
			so, se := chunk(r-s, n, w, es)
			ro, re := chunk(r-s-1, n, w, es)
			if err := g.exchangeReduce(next, buf[so:se], prev, buf[ro:re], d, op, dl); err != nil {
				return err
			}
		}
		if op == Avg {
			o, e := chunk(r+1, n, w, es)
			divide(d, buf[o:e], w)
		}
		for s := range w - 1 {
			so, se := chunk(r+1-s, n, w, es)
			ro, re := chunk(r-s, n, w, es)
			if err := g.mesh.exchange(next, buf[so:se], prev, buf[ro:re], dl); err != nil {
				return err
			}
		}
	}
	return nil
}

// pipeSegment is the piece size of a reducing exchange: each piece is
// reduced while the next one is on its way.
const pipeSegment = 1 << 20

// exchangeReduce sends out to rank to while receiving, from rank from,
// the peer's copy of acc's chunk in pieces, reducing each into acc as it
// arrives.
func (g *Group) exchangeReduce(to int, out []byte, from int, acc []byte, d DType, op ReduceOp, dl time.Time) error {
	errc := make(chan error, 1)
	go func() {
		for off := 0; off < len(out); off += pipeSegment {
			if err := g.mesh.send(to, out[off:min(off+pipeSegment, len(out))], dl); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	var rerr error
	tmp := g.scratchBuf(min(pipeSegment, len(acc)))
	for off := 0; off < len(acc) && rerr == nil; off += pipeSegment {
		piece := acc[off:min(off+pipeSegment, len(acc))]
		if rerr = g.mesh.recv(from, tmp[:len(piece)], dl); rerr == nil {
			reduceInto(d, op, piece, tmp[:len(piece)])
		}
	}
	if rerr != nil {
		g.mesh.close() // unblocks the sender
		<-errc
		return rerr
	}
	return <-errc
}

// AllGather gathers every rank's in into out (size ranks x in, in rank
// order).
func (g *Group) AllGather(out, in *memory.Tensor) (*Work, error) {
	ib, ob := in.Bytes(), out.Bytes()
	if ib == nil || ob == nil || len(ob) != len(ib)*g.size {
		return nil, fmt.Errorf("comm: all_gather: output of %d bytes for %d ranks of %d: want %d", len(ob), g.size, len(ib), len(ib)*g.size)
	}
	return g.launch("all_gather", false, func(dl time.Time) error {
		w, r, n := g.size, g.rank, len(ib)
		copy(ob[r*n:], ib)
		next, prev := (r+1)%w, (r-1+w)%w
		for s := range w - 1 {
			si, ri := ((r-s)%w+w)%w, ((r-s-1)%w+w)%w
			if err := g.mesh.exchange(next, ob[si*n:(si+1)*n], prev, ob[ri*n:(ri+1)*n], dl); err != nil {
				return err
			}
		}
		return nil
	}, out, in)
}

// ReduceScatter reduces in (size ranks x out) across the ranks and leaves
// this rank's part in out.
func (g *Group) ReduceScatter(out, in *memory.Tensor, d DType, op ReduceOp) (*Work, error) {
	ib, ob := in.Bytes(), out.Bytes()
	if ib == nil || ob == nil || len(ib) != len(ob)*g.size || len(ob)%d.Size() != 0 {
		return nil, fmt.Errorf("comm: reduce_scatter: input of %d bytes for %d ranks of %d %s bytes", len(ib), g.size, len(ob), d)
	}
	return g.launch("reduce_scatter", false, func(dl time.Time) error {
		w, r, n := g.size, g.rank, len(ob)
		if cap(g.work) < len(ib) {
			g.work = make([]byte, len(ib))
		}
		acc := g.work[:len(ib)]
		copy(acc, ib)
		next, prev := (r+1)%w, (r-1+w)%w
		for s := range w - 1 {
			si, ri := ((r-s-1)%w+w)%w, ((r-s-2)%w+w)%w
			if err := g.exchangeReduce(next, acc[si*n:(si+1)*n], prev, acc[ri*n:(ri+1)*n], d, op, dl); err != nil {
				return err
			}
		}
		copy(ob, acc[r*n:(r+1)*n])
		if op == Avg {
			divide(d, ob, w)
		}
		return nil
	}, out, in)
}

// Broadcast copies root's t to every rank, along a chain from root.
func (g *Group) Broadcast(t *memory.Tensor, root int) (*Work, error) {
	b := t.Bytes()
	if b == nil || root < 0 || root >= g.size {
		return nil, fmt.Errorf("comm: broadcast from rank %d of %d", root, g.size)
	}
	return g.launch("broadcast", false, func(dl time.Time) error {
		w := g.size
		pos := (g.rank - root + w) % w
		if pos > 0 {
			if err := g.mesh.recv((g.rank-1+w)%w, b, dl); err != nil {
				return err
			}
		}
		if pos < w-1 {
			return g.mesh.send((g.rank+1)%w, b, dl)
		}
		return nil
	}, t)
}

// AllToAll sends part p of in to rank p and receives rank p's part for
// this rank in part p of out (equal parts).
func (g *Group) AllToAll(out, in *memory.Tensor) (*Work, error) {
	ib, ob := in.Bytes(), out.Bytes()
	if ib == nil || ob == nil || len(ib) != len(ob) || len(ib)%g.size != 0 {
		return nil, fmt.Errorf("comm: all_to_all: %d and %d bytes: want equal sizes, a multiple of %d ranks", len(ib), len(ob), g.size)
	}
	return g.launch("all_to_all", false, func(dl time.Time) error {
		w, r, n := g.size, g.rank, len(ib)/g.size
		copy(ob[r*n:(r+1)*n], ib[r*n:(r+1)*n])
		for s := 1; s < w; s++ {
			to, from := (r+s)%w, (r-s+w)%w
			if err := g.mesh.exchange(to, ib[to*n:(to+1)*n], from, ob[from*n:(from+1)*n], dl); err != nil {
				return err
			}
		}
		return nil
	}, out, in)
}

// Send sends t to rank peer.
func (g *Group) Send(t *memory.Tensor, peer int) (*Work, error) {
	if peer < 0 || peer >= g.size || peer == g.rank {
		return nil, fmt.Errorf("comm: send to rank %d of %d (this is rank %d)", peer, g.size, g.rank)
	}
	b := t.Bytes()
	return g.launch("send", true, func(dl time.Time) error { return g.mesh.send(peer, b, dl) }, t)
}

// Recv receives into t from rank peer.
func (g *Group) Recv(t *memory.Tensor, peer int) (*Work, error) {
	if peer < 0 || peer >= g.size || peer == g.rank {
		return nil, fmt.Errorf("comm: receive from rank %d of %d (this is rank %d)", peer, g.size, g.rank)
	}
	b := t.Bytes()
	return g.launch("recv", true, func(dl time.Time) error { return g.mesh.recv(peer, b, dl) }, t)
}

// Barrier completes when every rank has entered it.
func (g *Group) Barrier() (*Work, error) {
	return g.launch("barrier", false, func(dl time.Time) error {
		w, r := g.size, g.rank
		var token [1]byte
		var in [1]byte
		for range w - 1 {
			if err := g.mesh.exchange((r+1)%w, token[:], (r-1+w)%w, in[:], dl); err != nil {
				return err
			}
		}
		return nil
	})
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
