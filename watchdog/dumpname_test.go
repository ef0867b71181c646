package watchdog

import "testing"

func TestParseDumpFileName(t *testing.T) {
	for _, tt := range []struct {
		name string
		rank int
		ok   bool
	}{
		{"fr_trace_rank_0.json", 0, true},
		{"fr_trace_rank_127.json", 127, true},
		{"fr_trace_rank_007.json", 0, false}, // not a name gorun writes
		{"fr_trace_rank_-1.json", 0, false},
		{"fr_trace_rank_1.json.tmp", 0, false},
		{"fr_trace_rank_.json", 0, false},
		{"trace_rank_1.json", 0, false},
	} {
		rank, ok := ParseDumpFileName(tt.name)
		if rank != tt.rank || ok != tt.ok {
			t.Errorf("ParseDumpFileName(%q) = %d, %v; want %d, %v", tt.name, rank, ok, tt.rank, tt.ok)
		}
		if ok && DumpFileName(rank) != tt.name {
			t.Errorf("DumpFileName(%d) = %q; want %q", rank, DumpFileName(rank), tt.name)
		}
	}
}
