package launcher

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestSweepDumpFolders: a killed run's empty dump folders go; a live
// run's, and any holding a dump, stay.
func TestSweepDumpFolders(t *testing.T) {
	tmp, base := t.TempDir(), t.TempDir()
	for _, p := range []string{"gorun-dead-1/attempt_0", "gorun-live-1/attempt_0", "gorun-dumped-1/attempt_0"} {
		if err := os.MkdirAll(filepath.Join(base, p), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(tmp, "gorun-live-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "gorun-dumped-1/attempt_0/fr_trace_rank_0.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sweepDumpFolders(context.Background(), base, tmp)
	for _, p := range []struct {
		name string
		kept bool
	}{{"gorun-dead-1", false}, {"gorun-live-1/attempt_0", true}, {"gorun-dumped-1/attempt_0/fr_trace_rank_0.json", true}} {
		if _, err := os.Lstat(filepath.Join(base, p.name)); (err == nil) != p.kept {
			t.Errorf("%s kept %v; want %v", p.name, err == nil, p.kept)
		}
	}
}

func mkdir(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Mkdir(path, mode); err != nil {
		t.Fatal(err)
	}
}
