package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchMemory(t *testing.T) {
	t.Parallel()
	r := runGorun(t, testEnv(), "bench", "memory", "--workload", "ddp-late-wait", "--mode", "all", "--format", "json")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	byMode := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var res map[string]any
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		for _, k := range []string{"workload", "mode", "peak_reserved_bytes", "peak_allocated_bytes", "events_created", "violations", "oom"} {
			if _, ok := res[k]; !ok {
				t.Errorf("no %q in %s", k, line)
			}
		}
		byMode[res["mode"].(string)] = res
	}
	for _, m := range []string{"0", "1", "2", "3"} {
		if v := byMode[m]["violations"].(float64); v != 0 {
			t.Errorf("mode %s: %v violations", m, v)
		}
	}
	if v := byMode["none"]["violations"].(float64); v == 0 {
		t.Error("without protection the late wait shows no violation")
	}
	if e := byMode["2"]["events_created"].(float64); e != 0 {
		t.Errorf("mode 2 created %v events; it records none for collectives", e)
	}
	for _, tt := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"MULTI_STREAM_MEMORY_REUSE=two"}, []string{"--workload", "ddp"}, `MULTI_STREAM_MEMORY_REUSE="two": want 0, 1, 2 or 3`},
		{nil, []string{"--workload", "ddp", "--mode", "5"}, `--mode="5"`},
		{nil, []string{"--workload", "nope"}, `--workload="nope"`},
	} {
		r := runGorun(t, testEnv(tt.env...), append([]string{"bench", "memory"}, tt.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("%v %v: exit %d\n%s", tt.env, tt.args, r.code, r.stderr)
		}
	}
	frag := runGorun(t, testEnv(), "bench", "memory", "--workload", "fragmentation", "--mode", "2")
	exp := runGorun(t, testEnv(), "bench", "memory", "--workload", "fragmentation", "--mode", "2", "--expandable-segments")
	if !strings.Contains(frag.stdout, "true") || !strings.Contains(exp.stdout, "false") {
		t.Errorf("fragmentation: fixed segments should run out of memory, expandable ones not:\n%s\n%s", frag.stdout, exp.stdout)
	}
}
