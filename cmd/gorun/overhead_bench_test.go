package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchLaunchMeasuresOverhead: gorun bench launch measures gorun's
// own launch overhead (two /bin/true workers) against the shell floor in
// the same run, reports it in its JSON and its progress, and counts only
// the measured runs.
func TestBenchLaunchMeasuresOverhead(t *testing.T) {
	t.Parallel()
	py := testPython(t)
	r := runGorun(t, testEnv(), "bench", "launch", "--python", py, "--runs=1", "--warmup=0", "--skip-torchrun")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var res struct {
		Overhead map[string]struct {
			N        int   `json:"n"`
			MedianNS int64 `json:"median_ns"`
		} `json:"overhead"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("JSON result %q: %v", r.stdout, err)
	}
	for _, k := range []string{"gorun_true_job", "shell_true_job", "direct_true_pair", "gorun_version"} {
		if st := res.Overhead[k]; st.N != 30 || st.MedianNS <= 0 {
			t.Errorf("overhead %s: %+v, want 30 measured runs", k, st)
		}
	}
	if !strings.Contains(r.stderr, "launch overhead, two /bin/true workers: gorun ") {
		t.Errorf("no progress line for the overhead\n%s", r.stderr)
	}
}
