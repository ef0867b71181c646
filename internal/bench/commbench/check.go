package commbench

import (
	"context"
	"unsafe"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/memory"
)

func f64(b []byte) []float64 { return unsafe.Slice((*float64)(unsafe.Pointer(&b[0])), len(b)/8) }

// sendRecv sends in to the next rank and receives out from the previous
// one; even ranks send first, so that no two ranks wait on each other.
func sendRecv(ctx context.Context, env *comm.Env, in, out *memory.Tensor) error {
	w, r := env.Size(), env.Rank()
	if w == 1 {
		copy(out.Bytes(), in.Bytes())
		return nil
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
	f64(in.Bytes())[0] = mine
	if err := comm.Sync(ctx)(env.AllGather(all, in)); err != nil {
		return nil, err
	}
	meds := f64(all.Bytes())
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
	fill := func(t *memory.Tensor, v byte) {
		b := t.Bytes()
		for i := range b {
			b[i] = 0
		}
		// One small value per element, exact in every dtype: the
		// element's low byte (little-endian integers and, for floats, a
		// value set through the dtype below).
		setAll(b, d, float64(v))
	}
	ok := true
	switch op {
	case "all_reduce":
		fill(in, byte(r+1))
		if err := run(); err != nil {
			return false, err
		}
		ok = allEqual(in.Bytes(), d, float64(w*(w+1)/2))
	case "broadcast":
		fill(in, byte(r+1))
		if err := run(); err != nil {
			return false, err
		}
		ok = allEqual(in.Bytes(), d, 1)
	case "send_recv":
		fill(in, byte(r+1))
		if err := run(); err != nil {
			return false, err
		}
		ok = w == 1 || allEqual(out.Bytes(), d, float64((r-1+w)%w+1))
	case "all_gather":
		fill(in, byte(r+1))
		if err := run(); err != nil {
			return false, err
		}
		n := len(in.Bytes())
		for q := range w {
			ok = ok && allEqual(out.Bytes()[q*n:(q+1)*n], d, float64(q+1))
		}
	case "reduce_scatter":
		fill(in, 1)
		if err := run(); err != nil {
			return false, err
		}
		ok = allEqual(out.Bytes(), d, float64(w))
	case "all_to_all":
		fill(in, byte(r+1))
		if err := run(); err != nil {
			return false, err
		}
		n := len(in.Bytes()) / w
		for q := range w {
			ok = ok && allEqual(out.Bytes()[q*n:(q+1)*n], d, float64(q+1))
		}
	}
	// Every rank's verdict.
	flag, err := env.Allocator.Empty(8, 0)
	if err != nil {
		return false, err
	}
	defer flag.Release()
	f64(flag.Bytes())[0] = map[bool]float64{true: 1, false: 0}[ok]
	if err := comm.Sync(ctx)(env.AllReduce(flag, comm.Float64, comm.Min)); err != nil {
		return false, err
	}
	return f64(flag.Bytes())[0] == 1, nil
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
