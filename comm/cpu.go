package comm

import (
	"fmt"
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// cpuBackend runs ring algorithms on host memory over a mesh of shared
// memory and TCP links.
type cpuBackend struct {
	rank, size int
	mesh       *mesh
	scratch    []byte
	work       []byte // reduce-scatter's accumulator
}

func (b *cpuBackend) Shutdown() { b.mesh.close() }
func (b *cpuBackend) Release()  { b.mesh.unmapShm() }

// scratchBuf returns the backend's scratch space of n bytes (reused).
func (b *cpuBackend) scratchBuf(n int) []byte {
	if cap(b.scratch) < n {
		b.scratch = make([]byte, n)
	}
	return b.scratch[:n]
}

func hostBytes(name string, ts ...*memory.Tensor) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		if out[i] = t.Bytes(); out[i] == nil {
			return nil, fmt.Errorf("comm: %s: the tensor has no host memory (the CPU backend needs host memory)", name)
		}
	}
	return out, nil
}

// chunk is the byte range of chunk i of n elements of size es split in w.
func chunk(i, n, w, es int) (int, int) {
	i = ((i % w) + w) % w
	return i * n / w * es, (i + 1) * n / w * es
}

// AllReduce is a ring reduce-scatter then a ring all-gather, in place.
func (b *cpuBackend) AllReduce(t *memory.Tensor, d DType, op ReduceOp, dl time.Time) error {
	bufs, err := hostBytes("all_reduce", t)
	if err != nil {
		return err
	}
	buf := bufs[0]
	w, r, es := b.size, b.rank, d.Size()
	n := len(buf) / es
	if w == 1 {
		return nil
	}
	next, prev := (r+1)%w, (r-1+w)%w
	for s := range w - 1 {
		so, se := chunk(r-s, n, w, es)
		ro, re := chunk(r-s-1, n, w, es)
		if err := b.exchangeReduce(next, buf[so:se], prev, buf[ro:re], d, op, dl); err != nil {
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
		if err := b.mesh.exchange(next, buf[so:se], prev, buf[ro:re], dl); err != nil {
			return err
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
func (b *cpuBackend) exchangeReduce(to int, out []byte, from int, acc []byte, d DType, op ReduceOp, dl time.Time) error {
	errc := make(chan error, 1)
	go func() {
		for off := 0; off < len(out); off += pipeSegment {
			if err := b.mesh.send(to, out[off:min(off+pipeSegment, len(out))], dl); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	var rerr error
	tmp := b.scratchBuf(min(pipeSegment, len(acc)))
	for off := 0; off < len(acc) && rerr == nil; off += pipeSegment {
		piece := acc[off:min(off+pipeSegment, len(acc))]
		if rerr = b.mesh.recv(from, tmp[:len(piece)], dl); rerr == nil {
			reduceInto(d, op, piece, tmp[:len(piece)])
		}
	}
	if rerr != nil {
		b.mesh.close() // unblocks the sender
		<-errc
		return rerr
	}
	return <-errc
}

// AllGather is a ring all-gather.
func (b *cpuBackend) AllGather(out, in *memory.Tensor, dl time.Time) error {
	bufs, err := hostBytes("all_gather", out, in)
	if err != nil {
		return err
	}
	ob, ib := bufs[0], bufs[1]
	w, r, n := b.size, b.rank, len(ib)
	copy(ob[r*n:], ib)
	next, prev := (r+1)%w, (r-1+w)%w
	for s := range w - 1 {
		si, ri := ((r-s)%w+w)%w, ((r-s-1)%w+w)%w
		if err := b.mesh.exchange(next, ob[si*n:(si+1)*n], prev, ob[ri*n:(ri+1)*n], dl); err != nil {
			return err
		}
	}
	return nil
}

// ReduceScatter is a ring reduce-scatter that leaves chunk rank here.
func (b *cpuBackend) ReduceScatter(out, in *memory.Tensor, d DType, op ReduceOp, dl time.Time) error {
	bufs, err := hostBytes("reduce_scatter", out, in)
	if err != nil {
		return err
	}
	ob, ib := bufs[0], bufs[1]
	w, r, n := b.size, b.rank, len(ob)
	if cap(b.work) < len(ib) {
		b.work = make([]byte, len(ib))
	}
	acc := b.work[:len(ib)]
	copy(acc, ib)
	next, prev := (r+1)%w, (r-1+w)%w
	for s := range w - 1 {
		si, ri := ((r-s-1)%w+w)%w, ((r-s-2)%w+w)%w
		if err := b.exchangeReduce(next, acc[si*n:(si+1)*n], prev, acc[ri*n:(ri+1)*n], d, op, dl); err != nil {
			return err
		}
	}
	copy(ob, acc[r*n:(r+1)*n])
	if op == Avg {
		divide(d, ob, w)
	}
	return nil
}

// Broadcast passes root's buffer along a chain.
func (b *cpuBackend) Broadcast(t *memory.Tensor, root int, dl time.Time) error {
	bufs, err := hostBytes("broadcast", t)
	if err != nil {
		return err
	}
	w := b.size
	pos := (b.rank - root + w) % w
	if pos > 0 {
		if err := b.mesh.recv((b.rank-1+w)%w, bufs[0], dl); err != nil {
			return err
		}
	}
	if pos < w-1 {
		return b.mesh.send((b.rank+1)%w, bufs[0], dl)
	}
	return nil
}

// AllToAll exchanges pairwise, one peer per step.
func (b *cpuBackend) AllToAll(out, in *memory.Tensor, dl time.Time) error {
	bufs, err := hostBytes("all_to_all", out, in)
	if err != nil {
		return err
	}
	ob, ib := bufs[0], bufs[1]
	w, r, n := b.size, b.rank, len(ib)/b.size
	copy(ob[r*n:(r+1)*n], ib[r*n:(r+1)*n])
	for s := 1; s < w; s++ {
		to, from := (r+s)%w, (r-s+w)%w
		if err := b.mesh.exchange(to, ib[to*n:(to+1)*n], from, ob[from*n:(from+1)*n], dl); err != nil {
			return err
		}
	}
	return nil
}

// Send sends to peer.
func (b *cpuBackend) Send(t *memory.Tensor, peer int, dl time.Time) error {
	bufs, err := hostBytes("send", t)
	if err != nil {
		return err
	}
	return b.mesh.send(peer, bufs[0], dl)
}

// Recv receives from peer.
func (b *cpuBackend) Recv(t *memory.Tensor, peer int, dl time.Time) error {
	bufs, err := hostBytes("recv", t)
	if err != nil {
		return err
	}
	return b.mesh.recv(peer, bufs[0], dl)
}

// Barrier passes a token around the ring size-1 times.
func (b *cpuBackend) Barrier(dl time.Time) error {
	w, r := b.size, b.rank
	var token, in [1]byte
	for range w - 1 {
		if err := b.mesh.exchange((r+1)%w, token[:], (r-1+w)%w, in[:], dl); err != nil {
			return err
		}
	}
	return nil
}
