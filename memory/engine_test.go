package memory

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// job is one scenario's device, allocator, engine and streams.
type job struct {
	t      *testing.T
	d      *SimDevice
	a      *Allocator
	e      *Engine
	comm   []Stream
	gates  []chan struct{}
	nextID int
}

func newJob(t *testing.T, mode Mode, comms int) *job {
	d := newSim(t, 1<<30)
	a := NewAllocator(d, AllocatorConfig{})
	j := &job{t: t, d: d, a: a, e: NewEngine(a, mode)}
	for range comms {
		j.comm = append(j.comm, d.NewStream())
	}
	return j
}

// tensor allocates on the compute stream (0) and writes it there.
func (j *job) tensor(size int64) *Tensor {
	j.t.Helper()
	x := mustEmpty(j.t, j.a, size, 0)
	j.d.Launch(0, Op{Name: "fill", Writes: []Region{x.Region()}})
	return x
}

// collective launches an operation on comm stream c over tensors, as a
// process group does: the comm stream waits for the compute stream, the
// op runs (held at a gate), the end event is recorded, the engine told.
func (j *job) collective(c int, p2p bool, tensors ...*Tensor) *Work {
	j.nextID++
	ready := j.d.NewEvent()
	j.d.Record(ready, 0)
	j.d.StreamWait(j.comm[c], ready)
	var regions []Region
	for _, x := range tensors {
		regions = append(regions, x.Region())
	}
	gate := make(chan struct{})
	j.gates = append(j.gates, gate)
	j.d.Launch(j.comm[c], Op{Name: fmt.Sprintf("collective #%d", j.nextID), Reads: regions, Writes: regions, Gate: gate})
	w := &Work{Stream: j.comm[c], End: j.d.NewEvent(), P2P: p2p}
	j.d.Record(w.End, j.comm[c])
	j.e.Launch(w, tensors...)
	return w
}

// finish lets every collective run.
func (j *job) finish() {
	for _, g := range j.gates {
		close(g)
	}
	j.gates = nil
}

// complete is the watchdog: it sees w's end event complete.
func (j *job) complete(w *Work) {
	j.t.Helper()
	if err := j.d.Synchronize(context.Background(), w.End); err != nil {
		j.t.Fatal(err)
	}
	j.e.Completed(w)
}

// churn reuses memory on the compute stream: allocations of the sizes
// just freed, written at once.
func (j *job) churn(sizes ...int64) {
	j.t.Helper()
	j.e.Drain()
	for _, s := range sizes {
		x := j.tensor(s)
		x.Release()
	}
}

func (j *job) violations() int {
	n, _ := j.d.Violations()
	return n
}

var scenarios = []struct {
	name string
	run  func(j *job)
}{
	{"wait then release", func(j *job) {
		x := j.tensor(mib)
		w := j.collective(0, false, x)
		j.e.Wait(w, 0)
		x.Release()
		j.churn(mib)
		j.finish()
	}},
	{"release then wait", func(j *job) {
		x := j.tensor(mib)
		w := j.collective(0, false, x)
		x.Release()
		j.churn(mib)
		j.e.Wait(w, 0)
		j.churn(mib)
		j.finish()
	}},
	{"never wait (watchdog)", func(j *job) {
		x := j.tensor(mib)
		w := j.collective(0, false, x)
		x.Release()
		j.churn(mib)
		j.finish()
		j.complete(w)
		j.churn(mib, mib)
	}},
	{"point-to-point", func(j *job) {
		x := j.tensor(mib)
		w := j.collective(0, true, x)
		x.Release()
		j.churn(mib)
		j.e.Wait(w, 0)
		j.churn(mib)
		j.finish()
	}},
	{"two concurrent collectives on one tensor", func(j *job) {
		x := j.tensor(mib)
		a := j.collective(0, false, x)
		b := j.collective(0, false, x)
		j.e.Wait(a, 0)
		x.Release()
		j.churn(mib)
		j.e.Wait(b, 0)
		j.churn(mib)
		j.finish()
	}},
	{"two collectives on one tensor, two streams", func(j *job) {
		x := j.tensor(mib)
		a := j.collective(0, false, x)
		b := j.collective(1, false, x)
		j.e.Wait(b, 0)
		x.Release()
		j.churn(mib)
		j.e.Wait(a, 0)
		j.churn(mib)
		j.finish()
	}},
	{"coalesced group", func(j *job) {
		xs := []*Tensor{j.tensor(mib), j.tensor(2 * mib), j.tensor(4 * kib)}
		w := j.collective(0, false, xs...)
		for _, x := range xs {
			x.Release()
		}
		j.churn(mib, 2*mib, 4*kib)
		j.e.Wait(w, 0)
		j.churn(mib, 2*mib, 4*kib)
		j.finish()
	}},
	{"many streams", func(j *job) {
		var ws []*Work
		for c := range j.comm {
			x := j.tensor(mib)
			ws = append(ws, j.collective(c, false, x))
			x.Release()
		}
		j.churn(mib, mib, mib)
		for _, w := range ws {
			j.e.Wait(w, 0)
		}
		j.churn(mib, mib, mib)
		j.finish()
	}},
}

// TestModesProtectEveryScenario: no mode lets memory be reused while a
// collective may still use it; with no protection the checker sees it.
func TestModesProtectEveryScenario(t *testing.T) {
	for _, mode := range []Mode{ModeRecordStream, ModeEraseRecordStream, ModeAvoidRecordStream, ModeEraseWithBlock, ModeNone} {
		for _, sc := range scenarios {
			t.Run(fmt.Sprintf("mode %s/%s", mode, sc.name), func(t *testing.T) {
				j := newJob(t, mode, 4)
				sc.run(j)
				if err := j.d.SynchronizeDevice(context.Background()); err != nil {
					t.Fatal(err)
				}
				n := j.violations()
				unprotected := mode == ModeNone && sc.name != "wait then release"
				switch {
				case unprotected && n == 0:
					t.Errorf("no protection, yet no violation found")
				case !unprotected && n != 0:
					t.Errorf("%s", j.d.ViolationSummary())
				}
				j.e.Drain()
				if st := j.a.Stats(); st.AllocatedBytes.Current != 0 && mode != ModeAvoidRecordStream {
					t.Errorf("allocated %d at the end", st.AllocatedBytes.Current)
				}
			})
		}
	}
}

// Mode 2 holds the tensors of a Work nobody waits for until the watchdog
// saw it complete and the next call drained it; then the memory is free.
func TestModeTwoHandOff(t *testing.T) {
	j := newJob(t, ModeAvoidRecordStream, 1)
	x := j.tensor(mib)
	w := j.collective(0, false, x)
	x.Release()
	if st := j.a.Stats(); st.AllocatedBytes.Current != mib {
		t.Fatalf("the shelf should hold the tensor: allocated %d", st.AllocatedBytes.Current)
	}
	j.finish()
	j.complete(w)
	if j.e.Held() != 1 {
		t.Fatalf("held %d after completion; want 1 (handed off, not yet drained)", j.e.Held())
	}
	j.e.Drain()
	if st := j.a.Stats(); st.AllocatedBytes.Current != 0 || st.EventsCreated != 0 {
		t.Errorf("after the drain: allocated %d, events %d (mode 2 records none)", st.AllocatedBytes.Current, st.EventsCreated)
	}
	j.e.Wait(w, 0) // a late wait is harmless
}

// Mode 3 erases through the block even when the tensor is gone; mode 1
// cannot, and the block waits for its event.
func TestEraseAfterFree(t *testing.T) {
	for _, tt := range []struct {
		mode        Mode
		freedAtWait bool
	}{{ModeEraseRecordStream, false}, {ModeEraseWithBlock, true}} {
		j := newJob(t, tt.mode, 1)
		x := j.tensor(mib)
		w := j.collective(0, false, x)
		x.Release()
		j.e.Wait(w, 0)
		active := j.a.Stats().ActiveBytes.Current
		if freed := active == 0; freed != tt.freedAtWait {
			t.Errorf("mode %s: block back at wait = %v; want %v", tt.mode, freed, tt.freedAtWait)
		}
		j.churn(mib)
		j.finish()
		if n := j.violations(); n != 0 {
			t.Errorf("mode %s: %s", tt.mode, j.d.ViolationSummary())
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Mode
		err  bool
	}{{"", 2, false}, {"0", 0, false}, {" 1 ", 1, false}, {"2", 2, false}, {"3", 3, false}, {"4", 0, true}, {"-1", 0, true}, {"two", 0, true}, {"2x", 0, true}} {
		m, err := ParseMode(tt.in)
		if (err != nil) != tt.err || (err == nil && m != tt.want) {
			t.Errorf("ParseMode(%q) = %v, %v", tt.in, m, err)
		}
		if err != nil && !(strings.Contains(err.Error(), ReuseEnv) && strings.Contains(err.Error(), "0, 1, 2 or 3")) {
			t.Errorf("error %q should name %s and the valid values", err, ReuseEnv)
		}
	}
}
