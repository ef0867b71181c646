package comm

import (
	"context"
	"fmt"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/memory"
)

// world is size in-process ranks over loopback TCP, each with its own
// simulated device, allocator and reuse engine.
type world struct {
	groups []*Group
	devs   []*memory.SimDevice
	allocs []*memory.Allocator
}

// testSecret is the job secret of the in-process worlds.
var testSecret = func() Secret {
	h, err := NewSecretHex()
	if err != nil {
		panic(err)
	}
	s, err := ParseSecret(h)
	if err != nil {
		panic(err)
	}
	return s
}()

// serveStore serves a store on a free loopback port until the test ends,
// for clients with testSecret.
func serveStore(t testing.TB) *StoreServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := ServeStore(ln, testSecret)
	t.Cleanup(srv.Close)
	return srv
}

// dialStore is a client of a fresh store, closed when the test ends.
func dialStore(t testing.TB) *StoreClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := DialStore(ctx, serveStore(t).Addr(), testSecret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newWorld(t testing.TB, size int, mode memory.Mode, timeout time.Duration) *world {
	t.Helper()
	srv := serveStore(t)
	w := &world{groups: make([]*Group, size), devs: make([]*memory.SimDevice, size), allocs: make([]*memory.Allocator, size)}
	var wg sync.WaitGroup
	errs := make([]error, size)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for r := range size {
		d := memory.NewSimDevice(1 << 30)
		a := memory.NewAllocator(d, memory.AllocatorConfig{})
		w.devs[r], w.allocs[r] = d, a
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := DialStore(ctx, srv.Addr(), testSecret)
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { c.Close() })
			w.groups[r], errs[r] = NewGroup(ctx, c, r, size, "127.0.0.1", Options{Device: d, Allocator: a, Engine: memory.NewEngine(a, mode), Timeout: timeout, Secret: testSecret})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for r := range size {
			w.groups[r].Close()
			w.devs[r].Close()
		}
	})
	return w
}

// each runs fn for every rank at once and fails on any error.
func (w *world) each(t *testing.T, fn func(r int, g *Group) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(w.groups))
	for r, g := range w.groups {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = fn(r, g) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// setValues writes vals (as dtype d) into t.
func setValues(t *memory.Tensor, d DType, vals []float64) {
	for i, v := range vals {
		SetElement(t.Bytes(), d, i, v)
	}
}

func values(t *memory.Tensor, d DType) []float64 {
	out := make([]float64, len(t.Bytes())/d.Size())
	for i := range out {
		out[i] = Element(t.Bytes(), d, i)
	}
	return out
}

// input is rank r's value at i: small integers, exact in every dtype,
// with products that stay small.
func input(r, i int, op ReduceOp) float64 {
	if op == Prod {
		return float64(1 + (r+i)%2)
	}
	return float64(1 + r + i%3)
}

func expectReduce(d DType, op ReduceOp, size, i int) float64 {
	acc := input(0, i, op)
	for r := 1; r < size; r++ {
		v := input(r, i, op)
		switch op {
		case Sum, Avg:
			acc += v
		case Prod:
			acc *= v
		case Min:
			acc = math.Min(acc, v)
		case Max:
			acc = math.Max(acc, v)
		}
	}
	if op == Avg {
		switch d {
		case Int32, Int64, Uint8:
			acc = math.Trunc(acc / float64(size))
		case Float32:
			acc = float64(float32(acc) / float32(size))
		case BFloat16:
			acc = float64(BFloat16ToFloat32(BFloat16FromFloat32(float32(acc) / float32(size))))
		case Float16:
			acc = float64(Float16ToFloat32(Float16FromFloat32(float32(acc) / float32(size))))
		default:
			acc /= float64(size)
		}
	}
	return acc
}

var dtypes = []DType{Float32, Float64, BFloat16, Float16, Int32, Int64, Uint8}

// TestEveryOpDTypeAndReduction runs every collective, every dtype and
// every reduction at world sizes 1 to 5, with element counts that do not
// divide evenly among the ranks.
func TestEveryOpDTypeAndReduction(t *testing.T) {
	ctx := context.Background()
	for size := 1; size <= 5; size++ {
		t.Run(fmt.Sprintf("world %d", size), func(t *testing.T) {
			w := newWorld(t, size, memory.ModeAvoidRecordStream, 30*time.Second)
			const n = 37 // elements per rank: not a multiple of any world size
			for _, d := range dtypes {
				for _, op := range []ReduceOp{Sum, Avg, Min, Max, Prod} {
					w.each(t, func(r int, g *Group) error {
						x, err := w.allocs[r].Empty(int64(n*d.Size()), 0)
						if err != nil {
							return err
						}
						defer x.Release()
						vals := make([]float64, n)
						for i := range vals {
							vals[i] = input(r, i, op)
						}
						setValues(x, d, vals)
						if err := Sync(ctx)(g.AllReduce(x, d, op)); err != nil {
							return err
						}
						for i, got := range values(x, d) {
							if want := expectReduce(d, op, size, i); got != want {
								return fmt.Errorf("all_reduce %s %s: element %d = %v; want %v", d, op, i, got, want)
							}
						}
						return reduceScatterCheck(ctx, w.allocs[r], g, d, op, r, size)
					})
				}
				w.each(t, func(r int, g *Group) error { return gatherCheck(ctx, w.allocs[r], g, d, r, size) })
			}
			w.each(t, func(r int, g *Group) error { return Sync(ctx)(g.Barrier()) })
		})
	}
}

func reduceScatterCheck(ctx context.Context, a *memory.Allocator, g *Group, d DType, op ReduceOp, r, size int) error {
	const per = 5
	in, err := a.Empty(int64(per*size*d.Size()), 0)
	if err != nil {
		return err
	}
	defer in.Release()
	out, err := a.Empty(int64(per*d.Size()), 0)
	if err != nil {
		return err
	}
	defer out.Release()
	vals := make([]float64, per*size)
	for i := range vals {
		vals[i] = input(r, i, op)
	}
	setValues(in, d, vals)
	if err := Sync(ctx)(g.ReduceScatter(out, in, d, op)); err != nil {
		return err
	}
	for i, got := range values(out, d) {
		if want := expectReduce(d, op, size, r*per+i); got != want {
			return fmt.Errorf("reduce_scatter %s %s: element %d = %v; want %v", d, op, i, got, want)
		}
	}
	return nil
}

// gatherCheck covers all_gather, broadcast, all_to_all and send/recv.
func gatherCheck(ctx context.Context, a *memory.Allocator, g *Group, d DType, r, size int) error {
	const per = 3
	mk := func(n int) (*memory.Tensor, error) { return a.Empty(int64(n*d.Size()), 0) }
	in, _ := mk(per)
	out, _ := mk(per * size)
	defer in.Release()
	defer out.Release()
	setValues(in, d, []float64{float64(r), float64(r + 1), float64(r + 2)})
	if err := Sync(ctx)(g.AllGather(out, in)); err != nil {
		return err
	}
	for i, got := range values(out, d) {
		if want := float64(i/per + i%per); got != want {
			return fmt.Errorf("all_gather %s: element %d = %v; want %v", d, i, got, want)
		}
	}
	root := size - 1
	b, _ := mk(per)
	defer b.Release()
	if r == root {
		setValues(b, d, []float64{7, 8, 9})
	}
	if err := Sync(ctx)(g.Broadcast(b, root)); err != nil {
		return err
	}
	if v := values(b, d); v[0] != 7 || v[2] != 9 {
		return fmt.Errorf("broadcast %s: %v", d, v)
	}
	src, _ := mk(size)
	dst, _ := mk(size)
	defer src.Release()
	defer dst.Release()
	vals := make([]float64, size)
	for p := range vals {
		vals[p] = float64(10*r + p) // what r sends to p
	}
	setValues(src, d, vals)
	if err := Sync(ctx)(g.AllToAll(dst, src)); err != nil {
		return err
	}
	for p, got := range values(dst, d) {
		if want := float64(10*p + r); got != want {
			return fmt.Errorf("all_to_all %s: from rank %d got %v; want %v", d, p, got, want)
		}
	}
	if size > 1 {
		msg, _ := mk(per)
		defer msg.Release()
		if r%2 == 0 && r+1 < size {
			setValues(msg, d, []float64{float64(r), 1, 2})
			return Sync(ctx)(g.Send(msg, r+1))
		}
		if r%2 == 1 {
			if err := Sync(ctx)(g.Recv(msg, r-1)); err != nil {
				return err
			}
			if v := values(msg, d); v[0] != float64(r-1) {
				return fmt.Errorf("recv %s from rank %d: %v", d, r-1, v)
			}
		}
	}
	return nil
}

func TestCoalescedBlock(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, 3, memory.ModeAvoidRecordStream, 30*time.Second)
	w.each(t, func(r int, g *Group) error {
		var xs []*memory.Tensor
		if err := g.StartCoalescing(); err != nil {
			return err
		}
		var works []*Work
		for i := range 3 {
			x, err := w.allocs[r].Empty(64, 0)
			if err != nil {
				return err
			}
			setValues(x, Float32, []float64{float64(r + i)})
			wk, err := g.AllReduce(x, Float32, Sum)
			if err != nil {
				return err
			}
			if err := wk.Wait(ctx); err == nil {
				return fmt.Errorf("Wait inside the block succeeded")
			}
			xs, works = append(xs, x), append(works, wk)
		}
		all, err := g.EndCoalescing()
		if err != nil {
			return err
		}
		keep := make([]*memory.Tensor, len(xs))
		for i, x := range xs {
			keep[i] = x.Retain() // for reading the result
			x.Release()          // the caller's reference goes before the wait
		}
		if err := all.Wait(ctx); err != nil {
			return err
		}
		for i, wk := range works {
			if err := wk.Wait(ctx); err != nil {
				return err
			}
			if got := values(keep[i], Float32)[0]; got != float64(0+1+2+3*i) {
				return fmt.Errorf("tensor %d: %v", i, got)
			}
			keep[i].Release()
		}
		return nil
	})
}

// Subgroups of a 4-rank world, as a tp2 layout's tensor-parallel groups.
func TestSubgroups(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, 4, memory.ModeAvoidRecordStream, 30*time.Second)
	tp := [][]int{{0, 1}, {2, 3}}
	dp := [][]int{{0, 2}, {1, 3}}
	w.each(t, func(r int, g *Group) error {
		tpg, err := g.Subgroups(ctx, "tp", tp)
		if err != nil {
			return err
		}
		dpg, err := g.Subgroups(ctx, "dp", dp)
		if err != nil {
			return err
		}
		defer tpg.Close()
		defer dpg.Close()
		if tpg.Size() != 2 || tpg.ParentRank(tpg.Rank()) != r {
			return fmt.Errorf("tp group: size %d, rank %d", tpg.Size(), tpg.Rank())
		}
		x, err := w.allocs[r].Empty(4, 0)
		if err != nil {
			return err
		}
		defer x.Release()
		setValues(x, Int32, []float64{float64(r)})
		if err := Sync(ctx)(tpg.AllReduce(x, Int32, Sum)); err != nil {
			return err
		}
		if got, want := values(x, Int32)[0], float64(r/2*2*2+1); got != want {
			return fmt.Errorf("tp all_reduce: %v; want %v", got, want)
		}
		setValues(x, Int32, []float64{float64(r)})
		if err := Sync(ctx)(dpg.AllReduce(x, Int32, Sum)); err != nil {
			return err
		}
		if got, want := values(x, Int32)[0], float64(2*(r%2)+2); got != want {
			return fmt.Errorf("dp all_reduce: %v; want %v", got, want)
		}
		return nil
	})
}
