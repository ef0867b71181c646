package commbench

import (
	"context"
	"unsafe"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/memory"
)

// bytesOf views float64s as bytes (little-endian hosts).
func bytesOf(f []float64) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 8*len(f)) }

// sendRecv sends in to the next rank and receives out from the previous
// one; even ranks send first, so that no two ranks wait on each other.
func sendRecv(ctx context.Context, env *comm.Env, in, out *memory.Tensor) error {
	w, r := env.Size(), env.Rank()
	if w == 1 {
		b := make([]byte, in.Size())
		if err := env.Download(b, in); err != nil {
			return err
		}
		return env.Upload(out, b)
	}
	send := func() error { return comm.Sync(ctx)(env.Send(in, (r+1)%w)) }
	recv := func() error { return comm.Sync(ctx)(env.Recv(out, (r-1+w)%w)) }
	if r%2 == 0 {
		if err := send(); err != nil {
			return err
		}
		return recv()
	}
	if err := recv(); err != nil {
		return err
	}
	return send()
}

// slowRanks gathers every rank's median and names those over 1.2x the
// median of medians.
func slowRanks(ctx context.Context, env *comm.Env, mine float64) ([]int, error) {
	w := env.Size()
	in, err := env.Allocator.Empty(8, 0)
	if err != nil {
		return nil, err
	}
	defer in.Release()
	all, err := env.Allocator.Empty(int64(8*w), 0)
	if err != nil {
		return nil, err
	}
	defer all.Release()
	if err := env.Upload(in, bytesOf([]float64{mine})); err != nil {
		return nil, err
	}
	if err := comm.Sync(ctx)(env.AllGather(all, in)); err != nil {
		return nil, err
	}
	meds := make([]float64, w)
	if err := env.Download(bytesOf(meds), all); err != nil {
		return nil, err
	}
	mid := median(meds)
	var slow []int
	for r, m := range meds {
		if w > 2 && m > 1.2*mid {
			slow = append(slow, r)
		}
	}
	return slow, nil
}

// check runs op once more on known inputs and reports whether every rank
// got the right result.
func check(ctx context.Context, env *comm.Env, op string, in, out *memory.Tensor, d comm.DType, r, w int, run func() error) (bool, error) {
	// One small value per element, exact in every dtype.
	fill := func(v byte) error {
		b := make([]byte, in.Size())
		setAll(b, d, float64(v))
		return env.Upload(in, b)
	}
	get := func(t *memory.Tensor) ([]byte, error) {
		b := make([]byte, t.Size())
		return b, env.Download(b, t)
	}
	v := byte(r + 1)
	if op == "reduce_scatter" {
		v = 1
	}
	if err := fill(v); err != nil {
		return false, err
	}
	if err := run(); err != nil {
		return false, err
	}
	res := out
	if op == "all_reduce" || op == "broadcast" {
		res = in
	}
	b, err := get(res)
	if err != nil {
		return false, err
	}
	ok := true
	switch op {
	case "all_reduce":
		ok = allEqual(b, d, float64(w*(w+1)/2))
	case "broadcast":
		ok = allEqual(b, d, 1)
	case "send_recv":
		ok = allEqual(b, d, float64((r-1+w)%w+1))
	case "reduce_scatter":
		ok = allEqual(b, d, float64(w))
	case "all_gather", "all_to_all":
		n := len(b) / w
		for q := range w {
			ok = ok && allEqual(b[q*n:(q+1)*n], d, float64(q+1))
		}
	}
	// Every rank's verdict.
	flag, err := env.Allocator.Empty(8, 0)
	if err != nil {
		return false, err
	}
	defer flag.Release()
	verdict := []float64{map[bool]float64{true: 1, false: 0}[ok]}
	if err := env.Upload(flag, bytesOf(verdict)); err != nil {
		return false, err
	}
	if err := comm.Sync(ctx)(env.AllReduce(flag, comm.Float64, comm.Min)); err != nil {
		return false, err
	}
	if err := env.Download(bytesOf(verdict), flag); err != nil {
		return false, err
	}
	return verdict[0] == 1, nil
}

func setAll(b []byte, d comm.DType, v float64) {
	for i := range len(b) / d.Size() {
		comm.SetElement(b, d, i, v)
	}
}

func allEqual(b []byte, d comm.DType, v float64) bool {
	want := make([]byte, d.Size())
	setAll(want, d, v)
	es := d.Size()
	for i := 0; i+es <= len(b); i += es {
		for k := range es {
			if b[i+k] != want[k] {
				return false
			}
		}
	}
	return true
}
