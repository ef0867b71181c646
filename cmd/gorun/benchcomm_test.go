package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchComm(t *testing.T) {
	t.Parallel()
	r := runGorun(t, testEnv(), "bench", "comm", "--nproc-per-node", "3", "--ops", "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,send_recv,barrier",
		"--sizes", "4KiB,1MiB", "--iters", "2", "--warmup", "1", "--skip-anchors", "--format", "json")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var rep struct {
		Backend string `json:"backend"`
		World   int    `json:"world"`
		Results []struct {
			Op      string  `json:"op"`
			Size    int64   `json:"size_bytes"`
			AlgBW   float64 `json:"algbw_GBps"`
			Correct bool    `json:"correct"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v: %q", err, r.stdout)
	}
	if rep.Backend != "cpu" || rep.World != 3 || len(rep.Results) != 13 {
		t.Fatalf("report %+v", rep)
	}
	for _, res := range rep.Results {
		if !res.Correct || (res.Op != "barrier" && res.AlgBW <= 0) {
			t.Errorf("%+v", res)
		}
	}
	bad := runGorun(t, testEnv(), "bench", "comm", "--ops", "all_reduce,teleport")
	if bad.code != 2 || !strings.Contains(bad.stderr, `"teleport"`) {
		t.Errorf("unknown op: exit %d\n%s", bad.code, bad.stderr)
	}
}
