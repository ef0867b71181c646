package membench

import (
	"context"
	"testing"

	"github.com/gorun-dev/gorun/memory"
)

// Every workload under every mode: no violation in modes 0-3; the
// fragmentation workload runs out of memory only with fixed segments.
func TestWorkloads(t *testing.T) {
	modes := []memory.Mode{memory.ModeRecordStream, memory.ModeEraseRecordStream, memory.ModeAvoidRecordStream, memory.ModeEraseWithBlock, memory.ModeNone}
	for _, w := range Workloads {
		for _, m := range modes {
			for _, exp := range []bool{false, true} {
				res, err := Run(context.Background(), Config{Workload: w, Mode: m, ExpandableSegments: exp})
				if err != nil {
					t.Fatalf("%s mode %s: %v", w, m, err)
				}
				t.Logf("%+v", res)
				if m != memory.ModeNone && res.Violations != 0 {
					t.Errorf("%s mode %s expandable %v: %d violations", w, m, exp, res.Violations)
				}
				if wantOOM := w == "fragmentation" && !exp; res.OOM != wantOOM {
					t.Errorf("%s expandable %v: oom %v; want %v (%s)", w, exp, res.OOM, wantOOM, res.OOMError)
				}
			}
		}
	}
}
