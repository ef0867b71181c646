package comm

import (
	"fmt"
	"sync"
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// cpuBackend runs ring algorithms on host memory over a mesh of shared
// memory and TCP links. Its sender goroutine sends while the calling one
// receives, so that a collective allocates nothing once its scratch
// space has grown.
type cpuBackend struct {
	rank, size int
	mesh       *mesh
	scratch    []byte
	work       []byte // reduce-scatter's accumulator
	sends      chan sendJob
	sent       chan error
	stop       chan struct{}
	stopped    chan struct{}
	release    sync.Once
	token      [2]byte // Barrier's token out and in
}

// sendJob is one buffer for the sender: to rank to, in messages of at
// most piece bytes (none for an empty buffer), or as one message (even
// empty) when piece is 0.
type sendJob struct {
	to    int
	buf   []byte
	piece int
	dl    time.Time
}

func newCPUBackend(rank, size int, m *mesh) *cpuBackend {
	b := &cpuBackend{rank: rank, size: size, mesh: m, sends: make(chan sendJob), sent: make(chan error),
		stop: make(chan struct{}), stopped: make(chan struct{})}
	go b.sender()
	return b
}

// sender runs the send half of every exchange until Release.
func (b *cpuBackend) sender() {
	defer close(b.stopped)
	for {
		select {
		case j := <-b.sends:
			var err error
			if j.piece == 0 {
				err = b.mesh.send(j.to, j.buf, j.dl)
			}
			for off := 0; j.piece > 0 && off < len(j.buf) && err == nil; off += j.piece {
				err = b.mesh.send(j.to, j.buf[off:min(off+j.piece, len(j.buf))], j.dl)
			}
			b.sent <- err
		case <-b.stop:
			return
		}
	}
}

func (b *cpuBackend) Shutdown() { b.mesh.close() }

// Release stops the sender and unmaps the shared memory.
func (b *cpuBackend) Release() {
	b.release.Do(func() {
		close(b.stop)
		<-b.stopped
		b.mesh.unmapShm()
	})
}

// exchange sends out to rank to, in messages of at most piece bytes (see
// sendJob), while recv runs on the calling goroutine; it returns the
// first error.
func (b *cpuBackend) exchange(to int, out []byte, piece int, dl time.Time, recv func() error) error {
	b.sends <- sendJob{to: to, buf: out, piece: piece, dl: dl}
	rerr := recv()
	if rerr != nil {
		b.mesh.close() // unblocks the sender
	}
	serr := <-b.sent
	if rerr != nil {
		return rerr
	}
	return serr
}

// swap sends out to rank to while receiving in from rank from, each as
// one message.
func (b *cpuBackend) swap(to int, out []byte, from int, in []byte, dl time.Time) error {
	return b.exchange(to, out, 0, dl, func() error { return b.mesh.recv(from, in, dl) })
}

// scratchBuf returns the backend's scratch space of n bytes (reused).
func (b *cpuBackend) scratchBuf(n int) []byte {
	if cap(b.scratch) < n {
		b.scratch = make([]byte, n)
	}
	return b.scratch[:n]
}

// hostBytes is t's host memory.
func hostBytes(name string, t *memory.Tensor) ([]byte, error) {
	b := t.Bytes()
	if b == nil {
		return nil, fmt.Errorf("comm: %s: the tensor has no host memory (the CPU backend needs host memory)", name)
	}
	return b, nil
}

// hostBytes2 is out's and in's host memory.
func hostBytes2(name string, out, in *memory.Tensor) ([]byte, []byte, error) {
	ob, err := hostBytes(name, out)
	if err != nil {
		return nil, nil, err
	}
	ib, err := hostBytes(name, in)
	return ob, ib, err
}

// chunk is the byte range of chunk i of n elements of size es split in w.
func chunk(i, n, w, es int) (int, int) {
	i = ((i % w) + w) % w
	return i * n / w * es, (i + 1) * n / w * es
}

// AllReduce is a ring reduce-scatter then a ring all-gather, in place.
func (b *cpuBackend) AllReduce(t *memory.Tensor, d DType, op ReduceOp, dl time.Time) error {
	buf, err := hostBytes("all_reduce", t)
	if err != nil {
		return err
	}
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
		if err := b.swap(next, buf[so:se], prev, buf[ro:re], dl); err != nil {
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
	tmp := b.scratchBuf(min(pipeSegment, len(acc)))
	return b.exchange(to, out, pipeSegment, dl, func() error {
		for off := 0; off < len(acc); off += pipeSegment {
			piece := acc[off:min(off+pipeSegment, len(acc))]
			if err := b.mesh.recv(from, tmp[:len(piece)], dl); err != nil {
				return err
			}
			reduceInto(d, op, piece, tmp[:len(piece)])
		}
		return nil
	})
}

// AllGather is a ring all-gather.
func (b *cpuBackend) AllGather(out, in *memory.Tensor, dl time.Time) error {
	ob, ib, err := hostBytes2("all_gather", out, in)
	if err != nil {
		return err
	}
	w, r, n := b.size, b.rank, len(ib)
	copy(ob[r*n:], ib)
	next, prev := (r+1)%w, (r-1+w)%w
	for s := range w - 1 {
		si, ri := ((r-s)%w+w)%w, ((r-s-1)%w+w)%w
		if err := b.swap(next, ob[si*n:(si+1)*n], prev, ob[ri*n:(ri+1)*n], dl); err != nil {
			return err
		}
	}
	return nil
}

// ReduceScatter is a ring reduce-scatter that leaves chunk rank here.
func (b *cpuBackend) ReduceScatter(out, in *memory.Tensor, d DType, op ReduceOp, dl time.Time) error {
	ob, ib, err := hostBytes2("reduce_scatter", out, in)
	if err != nil {
		return err
	}
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
	buf, err := hostBytes("broadcast", t)
	if err != nil {
		return err
	}
	w := b.size
	pos := (b.rank - root + w) % w
	if pos > 0 {
		if err := b.mesh.recv((b.rank-1+w)%w, buf, dl); err != nil {
			return err
		}
	}
	if pos < w-1 {
		return b.mesh.send((b.rank+1)%w, buf, dl)
	}
	return nil
}

// AllToAll exchanges pairwise, one peer per step.
func (b *cpuBackend) AllToAll(out, in *memory.Tensor, dl time.Time) error {
	ob, ib, err := hostBytes2("all_to_all", out, in)
	if err != nil {
		return err
	}
	w, r, n := b.size, b.rank, len(ib)/b.size
	copy(ob[r*n:(r+1)*n], ib[r*n:(r+1)*n])
	for s := 1; s < w; s++ {
		to, from := (r+s)%w, (r-s+w)%w
		if err := b.swap(to, ib[to*n:(to+1)*n], from, ob[from*n:(from+1)*n], dl); err != nil {
			return err
		}
	}
	return nil
}

// Send sends to peer.
func (b *cpuBackend) Send(t *memory.Tensor, peer int, dl time.Time) error {
	buf, err := hostBytes("send", t)
	if err != nil {
		return err
	}
	return b.mesh.send(peer, buf, dl)
}

// Recv receives from peer.
func (b *cpuBackend) Recv(t *memory.Tensor, peer int, dl time.Time) error {
	buf, err := hostBytes("recv", t)
	if err != nil {
		return err
	}
	return b.mesh.recv(peer, buf, dl)
}

// Barrier passes a token around the ring size-1 times.
func (b *cpuBackend) Barrier(dl time.Time) error {
	w, r := b.size, b.rank
	for range w - 1 {
		if err := b.swap((r+1)%w, b.token[:1], (r-1+w)%w, b.token[1:], dl); err != nil {
			return err
		}
	}
	return nil
}
