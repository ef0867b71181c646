package comm

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDumpDirFallback: without GORUN_FR_DUMP_DIR (a worker started
// without gorun) the dumps go to this user's private folder in the
// temporary folder, never to a folder another user made first, and a run
// id that is not a plain name does not choose the path.
func TestDumpDirFallback(t *testing.T) {
	for _, tt := range []struct {
		name, runID, plant string // plant: mode of a folder made first at the per-user name, "" for none
		wantBase, wantLeaf string
	}{
		{name: "fresh", runID: "job7", wantBase: "gorun-flight-recorder-" + strconv.Itoa(os.Getuid()), wantLeaf: "job7"},
		{name: "no run id", wantBase: "gorun-flight-recorder-" + strconv.Itoa(os.Getuid()), wantLeaf: "job"},
		{name: "run id with a path", runID: "../../etc", wantBase: "gorun-flight-recorder-" + strconv.Itoa(os.Getuid()), wantLeaf: "job"},
		{name: "planted folder open to all", runID: "job7", plant: "0777", wantBase: "gorun-flight-recorder-" + strconv.Itoa(os.Getuid()) + "-", wantLeaf: "job7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			t.Setenv(DumpDirEnv, "")
			t.Setenv("TORCHELASTIC_RUN_ID", tt.runID)
			if tt.plant != "" {
				mode, _ := strconv.ParseUint(tt.plant, 8, 32)
				p := filepath.Join(tmp, "gorun-flight-recorder-"+strconv.Itoa(os.Getuid()))
				if err := os.Mkdir(p, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, os.FileMode(mode)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := dumpDir()
			if err != nil {
				t.Fatal(err)
			}
			base := filepath.Dir(got)
			if filepath.Dir(base) != tmp || filepath.Base(got) != tt.wantLeaf || !strings.HasPrefix(filepath.Base(base), tt.wantBase) ||
				(tt.plant != "" && filepath.Base(base) == strings.TrimSuffix(tt.wantBase, "-")) {
				t.Fatalf("dumpDir() = %s; want %s/%s*/%s", got, tmp, tt.wantBase, tt.wantLeaf)
			}
			if fi, err := os.Lstat(base); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				t.Errorf("%s: %v, %v; want a 0700 folder", base, fi.Mode(), err)
			}
		})
	}
	t.Run("set by gorun", func(t *testing.T) {
		t.Setenv(DumpDirEnv, "/given")
		if got, err := dumpDir(); err != nil || got != "/given" {
			t.Errorf("dumpDir() = %s, %v; want /given", got, err)
		}
	})
}
