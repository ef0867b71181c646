package launcher

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun-dev/gorun/launcher/probe"
	"github.com/gorun-dev/gorun/watchdog"
)

// sleepEvidence reads the probe's real snapshots and dumps of a hang
// (rank 1 of 3 slept before all_reduce #20, PyTorch 2.15) and splits them
// as two nodes would send them: ranks 0 and 1 on host "a", rank 2 on "b".
func sleepEvidence(t *testing.T) (a, b nodeEvidence) {
	t.Helper()
	dir := filepath.Join("probe", "testdata", "sleep")
	dumps, err := watchdog.ReadDumps(dir)
	if err != nil || len(dumps) != 3 {
		t.Fatalf("dumps: %d, %v", len(dumps), err)
	}
	a = nodeEvidence{Version: nodeEvidenceVersion, Host: "a"}
	b = nodeEvidence{Version: nodeEvidenceVersion, Host: "b"}
	for r := range 3 {
		s, ok, err := probe.Read(filepath.Join(dir, fmt.Sprintf("snapshot_%d.json", r)))
		if err != nil || !ok {
			t.Fatalf("snapshot %d: %v", r, err)
		}
		s = s.Trimmed()
		node, lr := &a, r
		if r == 2 {
			node, lr = &b, 0
		}
		node.Ranks = append(node.Ranks, rankEvidence{Rank: r, LocalRank: lr, PID: 100 + r, Snapshot: &s})
		for _, d := range dumps {
			if d.Rank == r {
				node.Dumps = append(node.Dumps, watchdog.Trim(d))
			}
		}
	}
	return a, b
}

func TestJudgeEvidence(t *testing.T) {
	a, b := sleepEvidence(t)
	both := [][]byte{encodeEvidence(&b), encodeEvidence(&a)}
	cases := []struct {
		name    string
		reports [][]byte
		root    []int
		host    string
		lines   []string
	}{
		{"both nodes", both, []int{1}, "a", []string{"rank 1 never entered all_reduce #", "rank 1 is outside any collective, at "}},
		{"only the node of the hung rank", [][]byte{encodeEvidence(&a)}, []int{1}, "a", []string{"the evidence of 1 of the 2 nodes came in"}},
		{"another gorun's form", append([][]byte{[]byte(`{"version":99}`)}, both...), []int{1}, "a", []string{"1 node(s) sent evidence in a form this gorun does not read"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeEvidence(tc.reports, 2)
			if fmt.Sprint(v.Root) != fmt.Sprint(tc.root) {
				t.Fatalf("root %v; want %v\n%s", v.Root, tc.root, strings.Join(v.Lines, "\n"))
			}
			if len(v.remote) != 1 || v.remote[0].Host != tc.host || v.remote[0].LocalRank != 1 || v.remote[0].PID != 101 || !v.remote[0].remote {
				t.Errorf("remote %+v; want rank 1, local rank 1, pid 101 on %q", v.remote, tc.host)
			}
			text := strings.Join(v.Lines, "\n")
			for _, l := range tc.lines {
				if !strings.Contains(text, l) {
					t.Errorf("lines lack %q:\n%s", l, text)
				}
			}
		})
	}
}

// TestEncodeEvidenceBounded: evidence past maxEvidence drops the dumps,
// then the recorders, then the snapshots, never the ranks.
func TestEncodeEvidenceBounded(t *testing.T) {
	a, _ := sleepEvidence(t)
	big := a
	pad := strings.Repeat("x", maxEvidence)
	big.Dumps = append([]watchdog.Dump{{Reason: pad}}, a.Dumps...)
	b := encodeEvidence(&big)
	if len(b) > maxEvidence {
		t.Fatalf("%d bytes; want at most %d", len(b), maxEvidence)
	}
	if big.Dumps != nil || len(big.Ranks) != 2 || big.Ranks[0].Snapshot == nil {
		t.Errorf("want the dumps dropped, the ranks and snapshots kept: dumps %d, ranks %d", len(big.Dumps), len(big.Ranks))
	}
	huge := a
	huge.Ranks = append([]rankEvidence(nil), a.Ranks...)
	s := *huge.Ranks[0].Snapshot
	s.Stack = append(s.Stack, probe.Frame{File: pad, Line: 1, Func: "f"})
	huge.Ranks[0].Snapshot = &s
	if b := encodeEvidence(&huge); len(b) > maxEvidence || len(huge.Ranks) != 2 || huge.Ranks[0].Snapshot != nil {
		t.Errorf("%d bytes, snapshot kept %v; want the oversized snapshot dropped, the ranks kept", len(b), huge.Ranks[0].Snapshot != nil)
	}
}
