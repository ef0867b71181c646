// Package commtest drives a vendor library's process group (comm/nccl,
// comm/hccl) through comm's API on its test doubles: every collective,
// checked on every rank.
package commtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/memory"
)

// Copier copies between host and device memory on a stream (kind 1:
// host to device, 2: device to host), as cudaMemcpyAsync and
// aclrtMemcpyAsync do.
type Copier interface {
	Copy(dst, src uintptr, n, kind int, stream uintptr) error
}

// NewGroup makes rank's group over st on its device.
type NewGroup func(ctx context.Context, st comm.Store, rank, size int, dev *memory.RuntimeDevice, opt comm.Options) (*comm.Group, error)

// Vendor is what the checks need of one library.
type Vendor struct {
	Runtime  memory.Runtime
	Copier   Copier
	NewGroup NewGroup
	// NoAvg: the library has no average; AllReduce with Avg must fail.
	NoAvg bool
}

// RunAllOps runs every collective of comm's API on size ranks, one
// goroutine and one device each, and checks the results.
func RunAllOps(t *testing.T, v Vendor, size int) {
	addr, secret := Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, size)
	for rank := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[rank] = runRank(ctx, v, addr, secret, rank, size)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Store serves a store on a free loopback port until the test ends and
// returns its address and the (fresh, random) secret its clients need.
func Store(t testing.TB) (string, comm.Secret) {
	t.Helper()
	h, err := comm.NewSecretHex()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := comm.ParseSecret(h)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := comm.ServeStore(ln, secret)
	t.Cleanup(srv.Close)
	return srv.Addr(), secret
}

// rankRun is one rank's group, allocator and copies.
type rankRun struct {
	ctx  context.Context
	v    Vendor
	dev  *memory.RuntimeDevice
	a    *memory.Allocator
	g    *comm.Group
	rank int
	size int
}

func runRank(ctx context.Context, v Vendor, addr string, secret comm.Secret, rank, size int) error {
	st, err := comm.DialStore(ctx, addr, secret)
	if err != nil {
		return err
	}
	defer st.Close()
	dev, err := memory.NewRuntimeDevice(v.Runtime, rank)
	if err != nil {
		return err
	}
	a := memory.NewAllocator(dev, memory.AllocatorConfig{})
	g, err := v.NewGroup(ctx, st, rank, size, dev, comm.Options{Allocator: a, Engine: memory.NewEngine(a, memory.ModeAvoidRecordStream)})
	if err != nil {
		return err
	}
	defer g.Close()
	r := &rankRun{ctx: ctx, v: v, dev: dev, a: a, g: g, rank: rank, size: size}
	return r.checkAll()
}

func (r *rankRun) checkAll() error {
	const n = 6 // elements per rank's part
	w, k := r.size, r.rank
	val := func(rank, i int) float32 { return float32(rank*100 + i) }
	part := func(rank int) []float32 {
		out := make([]float32, n*w)
		for i := range out {
			out[i] = val(rank, i)
		}
		return out
	}
	sum := func(i int) (s float32) {
		for q := range w {
			s += val(q, i)
		}
		return s
	}
	// all_reduce, sum and max, on size x n elements.
	got, err := r.run(part(k), n*w, func(x, _ *memory.Tensor) (*comm.Work, error) { return r.g.AllReduce(x, comm.Float32, comm.Sum) })
	if err != nil {
		return err
	}
	if err := expect("all_reduce sum", got, func(i int) float32 { return sum(i) }); err != nil {
		return err
	}
	got, err = r.run(part(k), n*w, func(x, _ *memory.Tensor) (*comm.Work, error) { return r.g.AllReduce(x, comm.Float32, comm.Max) })
	if err != nil {
		return err
	}
	if err := expect("all_reduce max", got, func(i int) float32 { return val(w-1, i) }); err != nil {
		return err
	}
	if r.v.NoAvg {
		if _, err := r.run(part(k), n, func(x, _ *memory.Tensor) (*comm.Work, error) { return r.g.AllReduce(x, comm.Float32, comm.Avg) }); err == nil || !strings.Contains(err.Error(), "avg") {
			return fmt.Errorf("all_reduce avg: %v; want an error naming the reduction", err)
		}
		return nil // the group is broken after a failed collective
	}
	// all_gather: part n of each rank.
	got, err = r.runOut(part(k)[:n], n*w, func(x, y *memory.Tensor) (*comm.Work, error) { return r.g.AllGather(y, x) })
	if err != nil {
		return err
	}
	if err := expect("all_gather", got, func(i int) float32 { return val(i/n, i%n) }); err != nil {
		return err
	}
	// reduce_scatter: this rank's part of the sum.
	got, err = r.runOut(part(k), n, func(x, y *memory.Tensor) (*comm.Work, error) { return r.g.ReduceScatter(y, x, comm.Float32, comm.Sum) })
	if err != nil {
		return err
	}
	if err := expect("reduce_scatter", got, func(i int) float32 { return sum(k*n + i) }); err != nil {
		return err
	}
	// broadcast from the last rank.
	got, err = r.run(part(k), n*w, func(x, _ *memory.Tensor) (*comm.Work, error) { return r.g.Broadcast(x, w-1) })
	if err != nil {
		return err
	}
	if err := expect("broadcast", got, func(i int) float32 { return val(w-1, i) }); err != nil {
		return err
	}
	// all_to_all: part q of rank p lands in part p of rank q.
	got, err = r.runOut(part(k), n*w, func(x, y *memory.Tensor) (*comm.Work, error) { return r.g.AllToAll(y, x) })
	if err != nil {
		return err
	}
	if err := expect("all_to_all", got, func(i int) float32 { return val(i/n, k*n+i%n) }); err != nil {
		return err
	}
	// send and receive: rank 0 to the last rank.
	if w > 1 && (k == 0 || k == w-1) {
		got, err = r.run(part(k)[:n], n, func(x, y *memory.Tensor) (*comm.Work, error) {
			if k == 0 {
				return r.g.Send(x, w-1)
			}
			return r.g.Recv(x, 0)
		})
		if err != nil {
			return err
		}
		if err := expect("send/recv", got, func(i int) float32 { return val(0, i) }); err != nil {
			return err
		}
	}
	return comm.Sync(r.ctx)(r.g.Barrier())
}

// run uploads in to a tensor x, makes y of outN elements, runs op and
// downloads its result: y's, or x's for the in-place collectives
// (all_reduce, broadcast, send, recv).
func (r *rankRun) run(in []float32, outN int, op func(x, y *memory.Tensor) (*comm.Work, error)) ([]float32, error) {
	return r.runInto(in, outN, false, op)
}

// runOut is run for collectives that write y.
func (r *rankRun) runOut(in []float32, outN int, op func(x, y *memory.Tensor) (*comm.Work, error)) ([]float32, error) {
	return r.runInto(in, outN, true, op)
}

func (r *rankRun) runInto(in []float32, outN int, intoY bool, op func(x, y *memory.Tensor) (*comm.Work, error)) ([]float32, error) {
	x, err := r.upload(in)
	if err != nil {
		return nil, err
	}
	defer x.Release()
	y, err := r.a.Empty(int64(4*outN), 0)
	if err != nil {
		return nil, err
	}
	defer y.Release()
	w, err := op(x, y)
	if err != nil {
		return nil, err
	}
	if err := w.Wait(r.ctx); err != nil {
		return nil, err
	}
	if intoY {
		return r.download(y, outN)
	}
	return r.download(x, outN)
}

func (r *rankRun) upload(v []float32) (*memory.Tensor, error) {
	host := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(f))
	}
	t, err := r.a.Empty(int64(len(host)), 0)
	if err != nil {
		return nil, err
	}
	return t, r.copy(t.Region().Ptr, uintptr(unsafe.Pointer(&host[0])), host, 1)
}

func (r *rankRun) download(t *memory.Tensor, n int) ([]float32, error) {
	host := make([]byte, 4*n)
	if err := r.copy(uintptr(unsafe.Pointer(&host[0])), t.Region().Ptr, host, 2); err != nil {
		return nil, err
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(host[4*i:]))
	}
	return out, nil
}

func (r *rankRun) copy(dst, src uintptr, host []byte, kind int) error {
	err := r.dev.Do(func() error { return r.v.Copier.Copy(dst, src, len(host), kind, r.dev.Handle(0)) })
	runtime.KeepAlive(host)
	return err
}

func expect(what string, got []float32, want func(int) float32) error {
	for i, g := range got {
		if w := want(i); g != w {
			return fmt.Errorf("%s: element %d = %v; want %v", what, i, g, w)
		}
	}
	return nil
}
