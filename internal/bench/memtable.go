package bench

import (
	"fmt"
	"strings"

	"github.com/gorun-dev/gorun/internal/bench/membench"
)

// memoryColumns are the columns of the memory table, in order.
var memoryColumns = []string{"workload", "mode", "expandable", "peak reserved MiB", "vs mode 0", "peak allocated MiB", "peak active MiB", "events", "violations", "out of memory"}

// MemoryColumns are the memory table's column titles, in order.
func MemoryColumns() []string { return append([]string(nil), memoryColumns...) }

// MemorySection names the section of docs/benchmarks.md that a `gorun
// bench memory` run rewrites: one for fixed segments, one for
// --expandable-segments.
func MemorySection(expandable bool) string {
	if expandable {
		return "bench memory expandable"
	}
	return "bench memory fixed"
}

// MemoryRows are the memory table's rows, one per result, as text cells
// in memoryColumns' order. The anchor of "vs mode 0" is the workload's
// mode-0 run among results (PyTorch's classic recordStream), "-" when
// there is none.
func MemoryRows(results []membench.Result) [][]string {
	anchor := map[string]int64{}
	for _, r := range results {
		if r.Mode == "0" {
			anchor[r.Workload] = r.PeakReservedBytes
		}
	}
	mib := func(b int64) string { return fmt.Sprintf("%.0f", float64(b)/(1<<20)) }
	rows := make([][]string, 0, len(results))
	for _, r := range results {
		ratio := "-"
		if a := anchor[r.Workload]; a > 0 {
			ratio = fmt.Sprintf("%.2fx", float64(r.PeakReservedBytes)/float64(a))
		}
		rows = append(rows, []string{r.Workload, r.Mode, fmt.Sprint(r.ExpandableSegments), mib(r.PeakReservedBytes), ratio,
			mib(r.PeakAllocatedBytes), mib(r.PeakActiveBytes), fmt.Sprint(r.EventsCreated), fmt.Sprint(r.Violations), fmt.Sprint(r.OOM)})
	}
	return rows
}

// MemoryMarkdown renders results as the section of docs/benchmarks.md
// (see MemorySection): a title line and the table, every row written by
// the program, so that none is lost as a copied table's were.
func MemoryMarkdown(results []membench.Result, expandable bool) string {
	var b strings.Builder
	if expandable {
		b.WriteString("Expandable segments (`--expandable-segments`):\n\n")
	} else {
		b.WriteString("Fixed segments:\n\n")
	}
	b.WriteString("| " + strings.Join(memoryColumns, " | ") + " |\n")
	b.WriteString(strings.Repeat("|---", len(memoryColumns)) + "|\n")
	for _, row := range MemoryRows(results) {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}
