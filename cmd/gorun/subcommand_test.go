package main

import (
	"encoding/json"
	"testing"
)

// TestSubcommandFlagsAfterArguments: `gorun report LOGDIR --format json`
// reads --format, as `gorun report --format json LOGDIR` does.
func TestSubcommandFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	logDir := t.TempDir()
	if r := runGorun(t, testEnv(), "--log-dir", logDir, "--rdzv-id=subjob", "--nproc-per-node=1", "--no-python", "/bin/true"); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	r := runGorun(t, testEnv(), "report", logDir, "--format", "json")
	var rep map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || rep["run_id"] != "subjob" {
		t.Errorf("gorun report LOGDIR --format json: exit %d, not the JSON report:\n%s%s", r.code, r.stdout, r.stderr)
	}
}
