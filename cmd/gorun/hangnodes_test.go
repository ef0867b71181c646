package main

import (
	"cmp"
	"fmt"
	"strings"
	"testing"
)

// TestHangVerdictAcrossNodes runs the unchanged training script on two
// gorun agents of two ranks each (c10d on loopback): the nodes vote
// through etcd, share their probes' evidence, and every node names the
// same rank of the other node; a rank that computes alone for longer
// than the timeout while the other node's ranks wait is no hang.
func TestHangVerdictAcrossNodes(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	cases := []struct {
		name  string
		nproc string // per node; "" for 2
		fault []string
		code  int
		want  []string // on both nodes
		// wantOne: on one node, group rank 0's, which compares the nodes
		// (whichever agent that is).
		wantOne []string
		not     []string
	}{
		{"rank 3 sleeps: node 1 sees the cause and declares", "", []string{"--fault", "sleep", "--fault-rank", "3"}, 124,
			[]string{"node 1 declared the job hung", "rank 3 never entered all_reduce #", "(ranks 0, 1, 2 wait in it)",
				"Root Cause (the rank that held the others up)", "rank      : 3 (local_rank: 1)"}, nil, nil},
		{"rank 3 desyncs: every node is quiet, node 0 declares", "", []string{"--fault", "desync", "--fault-rank", "3"}, 124,
			[]string{"node 0 declared the job hung: no rank of any of the 2 nodes showed a sign of life", "rank 3 called broadcast",
				"rank      : 3 (local_rank: 1)"}, nil, nil},
		{"rank 0 evaluates alone for 10 s, only rank 0 prints", "", []string{"--fault", "evaluate", "--fault-rank", "0", "--delay", "10", "--steps", "30", "--print-every", "1000"}, 0,
			nil, nil, []string{"declared the job hung", "hang:"}},
		{"node 1's ranks three times slower", "", []string{"--fault", "slow", "--fault-rank", "2,3", "--steps", "80"}, 0,
			nil, []string{"straggler watch: node 1 (", ") is a straggler: all its ranks came late together"}, []string{"rank 2 is a straggler", "rank 3 is a straggler", "node 0 ("}},
		{"rank 3 alone three times slower: a rank of node 1, not node 1", "", []string{"--fault", "slow", "--fault-rank", "3", "--steps", "80"}, 0,
			nil, []string{"straggler watch: rank 3 is a straggler"}, []string{"node 1 (", "node 0 ("}},
		{"rank 1, all of node 1, exits 0 early: node 0's rank loses its peer", "1", []string{"--fault", "exit0", "--fault-rank", "1"}, 1,
			nil, []string{"Root Cause (the rank that left while the others ran)", "all of node 1 (rank 1: its part done), while other nodes' ranks ran (on another node); rank 0's error says it lost a peer"},
			[]string{"Root Cause (first observed failure)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
			nproc := cmp.Or(tc.nproc, "2")
			nodes := startNodes(t, 2, func(i int) []string {
				return append(elasticArgs(ep, "hangnodes", i, "--nnodes=2", "--nproc-per-node="+nproc, "--hang-timeout=4s", "--python", py, faultScript), tc.fault...)
			})
			for i, n := range nodes {
				if code := waitExit(t, n.cmd); code != tc.code {
					t.Errorf("node %d exit %d; want %d", i, code, tc.code)
				}
			}
			for i, n := range nodes {
				s := n.stderr.String()
				for _, w := range tc.want {
					if !strings.Contains(s, w) {
						t.Errorf("node %d lacks %q", i, w)
					}
				}
				for _, w := range tc.not {
					if strings.Contains(s, w) {
						t.Errorf("node %d has %q", i, w)
					}
				}
			}
			for _, w := range tc.wantOne {
				if !strings.Contains(nodes[0].stderr.String()+nodes[1].stderr.String(), w) {
					t.Errorf("no node says %q", w)
				}
			}
			if t.Failed() {
				for i, n := range nodes {
					t.Logf("node %d stderr:\n%s", i, n.stderr.String())
				}
			}
		})
	}
}
