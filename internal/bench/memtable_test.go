package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun-dev/gorun/internal/bench/membench"
	"github.com/gorun-dev/gorun/internal/testkit/golden"
	"github.com/gorun-dev/gorun/memory"
)

// allModes are the modes of `gorun bench memory --mode all`, in its order.
var allModes = []memory.Mode{memory.ModeRecordStream, memory.ModeEraseRecordStream, memory.ModeAvoidRecordStream, memory.ModeEraseWithBlock, memory.ModeNone}

// tableRows parses a markdown table's data rows into cells.
func tableRows(t *testing.T, md string) [][]string {
	t.Helper()
	var rows [][]string
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| workload |") {
			continue
		}
		if !strings.HasSuffix(line, " |") {
			t.Errorf("row %q is cut off", line)
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
		rows = append(rows, cells)
	}
	return rows
}

// TestMemoryMarkdownHasEveryRun replays every workload under every mode,
// as `gorun bench memory --mode all` does, and checks that the section it
// writes has one complete row per run, in order: the fixed-segments table
// of docs/benchmarks.md once stopped after its eighth row.
func TestMemoryMarkdownHasEveryRun(t *testing.T) {
	for _, expandable := range []bool{false, true} {
		var results []membench.Result
		for _, w := range membench.Workloads {
			for _, m := range allModes {
				res, err := membench.Run(context.Background(), membench.Config{Workload: w, Mode: m, ExpandableSegments: expandable})
				if err != nil {
					t.Fatal(err)
				}
				results = append(results, res)
			}
		}
		md := MemoryMarkdown(results, expandable)
		rows := tableRows(t, md)
		if len(rows) != len(membench.Workloads)*len(allModes) {
			t.Errorf("expandable=%v: %d rows, want %d (every workload under every mode)\n%s", expandable, len(rows), len(membench.Workloads)*len(allModes), md)
		}
		for i, row := range rows {
			if len(row) != len(memoryColumns) {
				t.Errorf("row %d has %d cells, want %d: %q", i, len(row), len(memoryColumns), row)
				continue
			}
			for j, cell := range row {
				if cell == "" {
					t.Errorf("row %d: %s is empty", i, memoryColumns[j])
				}
			}
			if i < len(results) && (row[0] != results[i].Workload || row[1] != results[i].Mode) {
				t.Errorf("row %d is %s mode %s, want %s mode %s", i, row[0], row[1], results[i].Workload, results[i].Mode)
			}
			if row[1] == "0" && row[4] != "1.00x" {
				t.Errorf("row %d: mode 0 is the anchor, %s vs itself", i, row[4])
			}
		}
	}
}

// TestMemoryMarkdownGolden: the rendering of fixed results, against
// testdata/memtable.md (go test -update rewrites it).
func TestMemoryMarkdownGolden(t *testing.T) {
	const mib = 1 << 20
	results := []membench.Result{
		{Workload: "ddp", Mode: "0", PeakReservedBytes: 336 * mib, PeakAllocatedBytes: 192 * mib, PeakActiveBytes: 320 * mib, EventsCreated: 24},
		{Workload: "ddp", Mode: "2", PeakReservedBytes: 208 * mib, PeakAllocatedBytes: 192 * mib, PeakActiveBytes: 192 * mib},
		{Workload: "fsdp", Mode: "none", PeakReservedBytes: 88 * mib, PeakAllocatedBytes: 80 * mib, PeakActiveBytes: 80 * mib, Violations: 9},
		{Workload: "fragmentation", Mode: "1", ExpandableSegments: true, PeakReservedBytes: 80 * mib, PeakAllocatedBytes: 80 * mib, PeakActiveBytes: 80 * mib, OOM: true},
	}
	var got strings.Builder
	for _, expandable := range []bool{false, true} {
		got.WriteString("<" + MemorySection(expandable) + ">\n" + MemoryMarkdown(results, expandable))
	}
	golden.Check(t, "memtable.md", got.String())
}

// TestMemorySectionsReplaceOnlyTheirTables: writing both sections into
// a document twice keeps the text around them and each table whole.
func TestMemorySectionsReplaceOnlyTheirTables(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	doc := "# Benchmarks\n\n## Memory reuse\n\nIntro.\n\n<!-- begin bench memory fixed -->\nold\n<!-- end bench memory fixed -->\n\n" +
		"<!-- begin bench memory expandable -->\nold\n<!-- end bench memory expandable -->\n\n## Reading the memory figures\n\nText.\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	fixed := []membench.Result{{Workload: "ddp", Mode: "0", PeakReservedBytes: 1 << 20}, {Workload: "ddp", Mode: "1", PeakReservedBytes: 1 << 19}}
	exp := []membench.Result{{Workload: "fsdp", Mode: "0", ExpandableSegments: true, PeakReservedBytes: 1 << 20}}
	for range 2 {
		for _, c := range []struct {
			res []membench.Result
			exp bool
		}{{fixed, false}, {exp, true}} {
			if err := UpdateSection(path, MemorySection(c.exp), MemoryMarkdown(c.res, c.exp)); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"Intro.\n\n<!-- begin bench memory fixed -->\nFixed segments:", "| ddp | 1 | false | 0 | 0.50x |",
		"<!-- begin bench memory expandable -->\nExpandable segments", "| fsdp | 0 | true | 1 | 1.00x |", "<!-- end bench memory expandable -->\n\n## Reading the memory figures\n\nText.\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("document lacks %q:\n%s", want, got)
		}
	}
	if n := len(tableRows(t, got)); n != 3 || strings.Contains(got, "old") {
		t.Errorf("%d rows (want 3), or an old table left:\n%s", n, got)
	}
}
