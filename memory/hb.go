package memory

import (
	"fmt"
	"strings"
)

// vclock is a vector clock over streams: vc[s] is how many operations of
// stream s are known to have happened before.
type vclock []uint64

func (v vclock) get(s Stream) uint64 {
	if int(s) < len(v) {
		return v[s]
	}
	return 0
}

// merge raises v to at least o, growing it as needed.
func (v vclock) merge(o vclock) vclock {
	for len(v) < len(o) {
		v = append(v, 0)
	}
	for i, x := range o {
		v[i] = max(v[i], x)
	}
	return v
}

func (v vclock) clone() vclock { return append(vclock(nil), v...) }

// Violation is one use of memory that the stream order does not protect.
type Violation struct {
	// Kind is "reuse" (an allocation's memory used while work on the
	// previous allocation of the same bytes may still run) or
	// "use-after-free" (work enqueued on an allocation already freed).
	Kind string
	// Region is the memory used by Op; Prior is the overlapping region
	// of the earlier allocation (reuse only).
	Region, Prior Region
	// Op and Stream are the work that uses the memory; PriorOp and
	// PriorStream the unordered earlier work.
	Op, PriorOp         string
	Stream, PriorStream Stream
}

func (v Violation) String() string {
	if v.Kind == "use-after-free" {
		return fmt.Sprintf("use after free: %s on stream %d uses [%#x, +%d) of allocation %d, already freed",
			v.Op, v.Stream, v.Region.Ptr, v.Region.Size, v.Region.Gen)
	}
	return fmt.Sprintf("reuse: %s on stream %d uses [%#x, +%d) (allocation %d) while %s on stream %d may still use [%#x, +%d) (allocation %d): not ordered before it",
		v.Op, v.Stream, v.Region.Ptr, v.Region.Size, v.Region.Gen, v.PriorOp, v.PriorStream, v.Prior.Ptr, v.Prior.Size, v.Prior.Gen)
}

// access is one enqueued use of memory, with its place in its stream.
type access struct {
	region Region
	op     string
	stream Stream
	pos    uint64 // the op's index on its stream (its own clock entry)
}

// checker finds uses of memory that the order of streams, events and host
// synchronisation does not protect. It works on the enqueued program, not
// on timing: two uses conflict when they touch overlapping memory of
// different allocations and the earlier is not ordered before the later
// (happens-before by vector clocks), whether or not they happened to run
// apart. The caller holds the device's lock.
type checker struct {
	// host is what the host knows to have completed (synchronisation,
	// successful queries); every later enqueue is ordered after it.
	host     vclock
	accesses []access
	freed    map[uint64]bool
	found    []Violation
	count    int
}

// maxViolationsKept bounds the descriptions kept; all are counted.
const maxViolationsKept = 1000

func newChecker() *checker { return &checker{freed: map[uint64]bool{}} }

// observe records that the host saw the work up to vc complete.
func (c *checker) observe(vc vclock) { c.host = c.host.merge(vc) }

// released marks an allocation freed by its owner: enqueuing work on it is
// a use after free.
func (c *checker) released(gen uint64) { c.freed[gen] = true }

func (c *checker) report(v Violation) {
	c.count++
	if len(c.found) < maxViolationsKept {
		c.found = append(c.found, v)
	}
}

// check is called for op, enqueued on s with clock vc (its own position
// is vc[s]), before it is recorded.
func (c *checker) check(op *Op, s Stream, vc vclock) {
	c.prune()
	use := func(r Region) {
		if r.Size <= 0 {
			return
		}
		if c.freed[r.Gen] {
			c.report(Violation{Kind: "use-after-free", Region: r, Op: op.Name, Stream: s})
		}
		for _, a := range c.accesses {
			if a.region.Gen == r.Gen || a.region.Ptr >= r.Ptr+uintptr(r.Size) || r.Ptr >= a.region.Ptr+uintptr(a.region.Size) {
				continue
			}
			if vc.get(a.stream) < a.pos { // a does not happen before op
				c.report(Violation{Kind: "reuse", Region: r, Prior: a.region, Op: op.Name, PriorOp: a.op, Stream: s, PriorStream: a.stream})
			}
		}
		c.accesses = append(c.accesses, access{region: r, op: op.Name, stream: s, pos: vc.get(s)})
	}
	seen := map[Region]bool{}
	for _, list := range [][]Region{op.Reads, op.Writes} {
		for _, r := range list {
			if !seen[r] { // a region both read and written is one use
				seen[r] = true
				use(r)
			}
		}
	}
}

// prune forgets uses the host knows to be complete: every later enqueue
// is ordered after them.
func (c *checker) prune() {
	kept := c.accesses[:0]
	for _, a := range c.accesses {
		if c.host.get(a.stream) < a.pos {
			kept = append(kept, a)
		}
	}
	clear(c.accesses[len(kept):])
	c.accesses = kept
}

// summary describes the violations found.
func (c *checker) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d violations", c.count)
	for i, v := range c.found {
		if i == 10 {
			fmt.Fprintf(&b, "\n  ... and %d more", c.count-10)
			break
		}
		b.WriteString("\n  " + v.String())
	}
	return b.String()
}
