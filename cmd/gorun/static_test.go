package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestStaticNodesDiffer: static nodes of different worker counts (1 and
// 2, as torchrun's quickstart mixes them) get the ranks torchrun gives
// them, meeting once at the master port; nodes that disagree on
// --nnodes both end at once, saying why (they used to get different
// world sizes, and the job hung).
func TestStaticNodesDiffer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, `echo "$RANK $WORLD_SIZE $GROUP_RANK $LOCAL_RANK" > "$1/$RANK"`)
	static := func(nnodes, rank, nproc, port int) []string {
		return []string{fmt.Sprintf("--nnodes=%d", nnodes), fmt.Sprintf("--node-rank=%d", rank), fmt.Sprintf("--nproc-per-node=%d", nproc),
			"--master-addr=127.0.0.1", fmt.Sprintf("--master-port=%d", port), "--no-python", script, dir}
	}
	port := freePort(t, "127.0.0.1")
	c1, _, e1 := startGorun(t, testEnv(), static(2, 1, 2, port)...)
	c0, _, e0 := startGorun(t, testEnv(), static(2, 0, 1, port)...)
	for i, c := range []*node{{c0, nil, e0}, {c1, nil, e1}} {
		if code := waitExit(t, c.cmd); code != 0 {
			t.Fatalf("node %d exit %d\n%s", i, code, c.stderr)
		}
	}
	var got []string
	for _, r := range []string{"0", "1", "2"} {
		line, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.TrimSpace(string(line)))
	}
	if want := []string{"0 3 0 0", "1 3 1 0", "2 3 1 1"}; !slices.Equal(got, want) {
		t.Errorf("rank world group local: %q; want %q", got, want)
	}

	// torchrun's static key for the meeting's timeout.
	port = freePort(t, "127.0.0.1")
	if r := runGorun(t, testEnv(), append([]string{"--rdzv-conf=timeout=0.5"}, static(2, 0, 1, port)...)...); r.code == 0 || !strings.Contains(r.stderr, "join timeout: node 0 waited") {
		t.Errorf("node 0 alone with --rdzv-conf=timeout=0.5: exit %d\n%s", r.code, r.stderr)
	}

	port = freePort(t, "127.0.0.1")
	c1, _, e1 = startGorun(t, testEnv(), static(3, 1, 1, port)...)
	c0, _, e0 = startGorun(t, testEnv(), static(2, 0, 1, port)...)
	for i, c := range []*node{{c0, nil, e0}, {c1, nil, e1}} {
		if code := waitExit(t, c.cmd); code != 2 || !strings.Contains(c.stderr.String(), "(claiming --node-rank=1) has --nnodes=3, node 0 --nnodes=2") {
			t.Errorf("node %d of a job whose nodes disagree: exit %d; want 2, naming the difference\n%s", i, code, c.stderr)
		}
	}
}

// TestStaticTwoNodeGoDDP: a static two-node job of gorun's own Go workers
// trains: node 0 hands every node the job's secret at the meeting, so the
// workers' store and mesh, which authenticate with it, accept each other
// (each node had made its own, and the store refused node 1's ranks).
func TestStaticTwoNodeGoDDP(t *testing.T) {
	t.Parallel()
	port := freePort(t, "127.0.0.1")
	static := func(rank int) []string {
		return []string{"--nnodes=2", fmt.Sprintf("--node-rank=%d", rank), "--nproc-per-node=2",
			"--master-addr=127.0.0.1", fmt.Sprintf("--master-port=%d", port), "--no-python", ddpBin, "--steps", "5"}
	}
	c1, _, e1 := startGorun(t, testEnv(), static(1)...)
	c0, _, e0 := startGorun(t, testEnv(), static(0)...)
	for i, c := range []*node{{c0, nil, e0}, {c1, nil, e1}} {
		if code := waitExit(t, c.cmd); code != 0 {
			t.Errorf("node %d exit %d\n%s", i, code, c.stderr)
		}
	}
}
