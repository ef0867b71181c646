package memory

import (
	"context"
	"strings"
	"testing"
)

func newSim(t *testing.T, total int64) *SimDevice {
	t.Helper()
	d := NewSimDevice(total)
	t.Cleanup(d.Close)
	return d
}

// The checker is tested with planted bugs: the same bytes used by two
// allocations, ordered or not.
func TestCheckerFindsPlantedBugs(t *testing.T) {
	old := Region{Ptr: 0x1000, Size: 4096, Gen: 1}
	reused := Region{Ptr: 0x1800, Size: 4096, Gen: 2} // overlaps old
	apart := Region{Ptr: 0x9000, Size: 4096, Gen: 3}
	tests := []struct {
		name  string
		setup func(d *SimDevice, comm Stream)
		use   Region
		want  int
		kind  string
	}{
		{"reuse on another stream without order", func(d *SimDevice, comm Stream) {}, reused, 1, "reuse"},
		{"reuse after the stream waited for the event", func(d *SimDevice, comm Stream) {
			e := d.NewEvent()
			d.Record(e, comm)
			d.StreamWait(0, e)
		}, reused, 0, ""},
		{"reuse after the host synchronised", func(d *SimDevice, comm Stream) {
			e := d.NewEvent()
			d.Record(e, comm)
			if err := d.Synchronize(context.Background(), e); err != nil {
				t.Fatal(err)
			}
		}, reused, 0, ""},
		{"an event recorded before the use does not order it", func(d *SimDevice, comm Stream) {
			e := d.NewEvent()
			d.Record(e, comm)
			d.StreamWait(0, e)
			d.Launch(comm, Op{Name: "late", Reads: []Region{old}})
		}, reused, 1, "reuse"},
		{"no overlap", func(d *SimDevice, comm Stream) {}, apart, 0, ""},
		{"use after free", func(d *SimDevice, comm Stream) { d.Released(1) }, old, 1, "use-after-free"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newSim(t, 1<<20)
			comm := d.NewStream()
			d.Launch(comm, Op{Name: "allreduce", Reads: []Region{old}, Writes: []Region{old}})
			tt.setup(d, comm)
			d.Launch(0, Op{Name: "kernel", Writes: []Region{tt.use}})
			n, vs := d.Violations()
			if n != tt.want {
				t.Fatalf("%d violations; want %d: %s", n, tt.want, d.ViolationSummary())
			}
			if n > 0 && vs[0].Kind != tt.kind {
				t.Errorf("kind %s; want %s", vs[0].Kind, tt.kind)
			}
		})
	}
}

// Several in-flight operations on one block: ordering after one of them
// is not ordering after the others.
func TestCheckerSeveralUsersOfOneBlock(t *testing.T) {
	d := newSim(t, 1<<20)
	a, b := d.NewStream(), d.NewStream()
	old := Region{Ptr: 0x1000, Size: 512, Gen: 1}
	d.Launch(a, Op{Name: "A", Reads: []Region{old}})
	d.Launch(b, Op{Name: "B", Reads: []Region{old}})
	d.Launch(a, Op{Name: "A2", Reads: []Region{old}})
	e := d.NewEvent()
	d.Record(e, a)
	d.StreamWait(0, e)
	d.Launch(0, Op{Name: "reuse", Writes: []Region{{Ptr: 0x1000, Size: 512, Gen: 2}}})
	n, vs := d.Violations()
	if n != 1 || vs[0].PriorOp != "B" || !strings.Contains(vs[0].String(), "while B on stream") {
		t.Fatalf("%d violations; want only B's: %s", n, d.ViolationSummary())
	}
}

func TestSimRunsStreamsInOrderAndEventsComplete(t *testing.T) {
	d := newSim(t, 1<<20)
	s := d.NewStream()
	gate := make(chan struct{})
	var order []int
	d.Launch(s, Op{Name: "first", Gate: gate, Run: func() { order = append(order, 1) }})
	d.Launch(s, Op{Name: "second", Run: func() { order = append(order, 2) }})
	e := d.NewEvent()
	d.Record(e, s)
	if d.Query(e) {
		t.Fatal("event complete while the stream is held at its gate")
	}
	close(gate)
	if err := d.Synchronize(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != 1 || order[1] != 2 {
		t.Fatalf("order %v", order)
	}
	if !d.Query(d.NewEvent()) {
		t.Error("an event never recorded should be complete")
	}
}

func TestSimMemoryCapacity(t *testing.T) {
	d := newSim(t, 4<<20)
	p, err := d.Malloc(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Malloc(2 << 20); err == nil {
		t.Fatal("allocated beyond capacity")
	}
	if b := d.Bytes(p+100, 10); len(b) != 10 {
		t.Fatalf("Bytes: %d", len(b))
	}
	if err := d.Free(p); err != nil || d.FreeMemory() != 4<<20 {
		t.Fatalf("free: %v, %d", err, d.FreeMemory())
	}
}
