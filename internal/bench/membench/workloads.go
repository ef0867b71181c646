package membench

import "github.com/gorun-dev/gorun/memory"

const mib = 1 << 20

// ddp models DistributedDataParallel's backward: the gradients of each
// bucket are produced by backward compute, flattened into a communication
// buffer and all-reduced asynchronously on the communication stream while
// backward goes on; each buffer is waited on (on the compute stream),
// copied back and released two buckets later, while later buckets are
// still queued on the communication stream. Forward activations are freed
// during backward, so freed memory is reused at once. Three steps.
func ddp(r *run) error { return ddpSteps(r, false) }

// ddpLateWait is ddp where the buffers are released right after their
// all-reduce is launched and the waits come only at the end of the step
// (activations are kept until then): the RFC's stated risk for mode 2,
// whose shelves then hold every buffer until the late wait, while the
// next bucket's buffer would reuse the last one's memory.
func ddpLateWait(r *run) error { return ddpSteps(r, true) }

func ddpSteps(r *run, lateWait bool) error {
	const buckets, bucket, activation = 8, 8 * mib, 16 * mib
	grads := make([]*memory.Tensor, buckets)
	for i := range grads {
		g, err := r.empty(bucket)
		if err != nil {
			return err
		}
		grads[i] = g
	}
	defer release(grads...)
	for range 3 {
		acts := make([]*memory.Tensor, buckets)
		for i := range acts {
			a, err := r.empty(activation)
			if err != nil {
				return err
			}
			r.compute("forward", nil, []*memory.Tensor{a}, computeTime)
			acts[i] = a
		}
		type inflight struct {
			w    *memory.Work
			flat *memory.Tensor
			grad *memory.Tensor
		}
		var queue []inflight
		finish := func(f inflight) {
			r.wait(f.w)
			if f.flat != nil {
				r.compute("unflatten", []*memory.Tensor{f.flat}, []*memory.Tensor{f.grad}, copyTime)
				f.flat.Release()
			}
		}
		for i := buckets - 1; i >= 0; i-- {
			r.compute("backward", []*memory.Tensor{acts[i]}, []*memory.Tensor{grads[i]}, computeTime)
			if !lateWait {
				acts[i].Release()
			}
			flat, err := r.empty(bucket)
			if err != nil {
				return err
			}
			r.compute("flatten", []*memory.Tensor{grads[i]}, []*memory.Tensor{flat}, copyTime)
			w := r.collective("allreduce", flat)
			if lateWait {
				flat.Release() // the user drops the buffer; its wait comes later
				queue = append(queue, inflight{w: w})
				continue
			}
			queue = append(queue, inflight{w, flat, grads[i]})
			if len(queue) > 2 {
				finish(queue[0])
				queue = queue[1:]
			}
		}
		for _, f := range queue {
			finish(f)
		}
		if lateWait {
			release(acts...)
		}
		r.compute("optimizer", grads, grads, computeTime)
	}
	return nil
}

// fsdp models fully sharded data parallel: each layer's parameters are
// all-gathered on the communication stream one layer ahead, while the
// current layer computes; gathered parameters are released after use;
// backward gathers again, and each layer's full gradient is
// reduce-scattered and released at once, without waiting. In modes 0, 1
// and 3 that free records an event at the end of the communication
// queue, behind the all-gathers already queued: the block waits for the
// whole queue. Two steps of eight layers.
func fsdp(r *run) error {
	const layers, full, activation = 8, 16 * mib, 4 * mib
	gather := func(i int) (*memory.Tensor, *memory.Work, error) {
		p, err := r.empty(full)
		if err != nil {
			return nil, nil, err
		}
		return p, r.collective("allgather", p), nil
	}
	for range 2 {
		acts := make([]*memory.Tensor, layers)
		p, w, err := gather(0)
		if err != nil {
			return err
		}
		for i := range layers {
			var next *memory.Tensor
			var nextW *memory.Work
			if i+1 < layers {
				if next, nextW, err = gather(i + 1); err != nil {
					return err
				}
			}
			r.wait(w)
			a, err := r.empty(activation)
			if err != nil {
				return err
			}
			r.compute("forward", []*memory.Tensor{p}, []*memory.Tensor{a}, computeTime)
			acts[i] = a
			p.Release()
			p, w = next, nextW
		}
		var scatters []*memory.Work
		p, w, err = gather(layers - 1)
		if err != nil {
			return err
		}
		for i := layers - 1; i >= 0; i-- {
			var next *memory.Tensor
			var nextW *memory.Work
			if i > 0 {
				if next, nextW, err = gather(i - 1); err != nil {
					return err
				}
			}
			r.wait(w)
			g, err := r.empty(full)
			if err != nil {
				return err
			}
			r.compute("backward", []*memory.Tensor{p, acts[i]}, []*memory.Tensor{g}, computeTime)
			acts[i].Release()
			p.Release()
			scatters = append(scatters, r.collective("reduce_scatter", g))
			g.Release() // released at once; protected by the mode
			p, w = next, nextW
		}
		for _, s := range scatters {
			r.wait(s)
		}
	}
	return nil
}

// fragmentation is the seeds' Llama3-70B finding in miniature, on a
// 100 MiB device: two 40 MiB tensors are freed, then three 30 MiB ones
// are asked for. With fixed segments the first two 30 MiB requests split
// the cached 40 MiB segments, whose 10 MiB rests fit nothing, and the
// third finds no room (90 MiB asked of 100 MiB: out of memory). With
// expandable segments the freed range is reused contiguously and the
// third request maps one more page: it fits.
func fragmentation(r *run) error {
	var held []*memory.Tensor
	defer func() { release(held...) }()
	for _, step := range []struct {
		size int64
		free bool
	}{{40 * mib, false}, {40 * mib, false}, {0, true}, {30 * mib, false}, {30 * mib, false}, {30 * mib, false}} {
		if step.free {
			release(held...)
			held = nil
			continue
		}
		t, err := r.empty(step.size)
		if err != nil {
			return err
		}
		r.compute("write", nil, []*memory.Tensor{t}, copyTime)
		held = append(held, t)
	}
	return nil
}
