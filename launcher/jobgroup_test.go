package launcher

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/gorun-dev/gorun/internal/sys/cgroup"
)

// TestSweepJobCgroups: the cgroup of a gorun that is gone is removed (and
// what it still holds ended); the cgroup of a live pid is kept.
func TestSweepJobCgroups(t *testing.T) {
	own, err := cgroup.Own()
	if err != nil {
		t.Skipf("SKIPPED: no cgroup v2 here: %v", err)
	}
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(own, "gorun-"+strconv.Itoa(dead.Process.Pid)+"-test")
	alive := filepath.Join(own, "gorun-1-test") // pid 1 is always alive
	for _, d := range []string{gone, alive} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Skipf("SKIPPED: cannot make a cgroup below %s: %v", own, err)
		}
		t.Cleanup(func() { os.Remove(d) })
	}
	// The dead gorun's cgroup still holds a process (its guardian died).
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Process.Wait() })
	if err := os.WriteFile(filepath.Join(gone, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	// The first sweep ends the process (cgroup.kill); the cgroup can go
	// once it has been reaped, by this sweep or the next.
	removed := sweepJobCgroups(own)
	if !slices.Contains(removed, gone) {
		if err := sleeper.Wait(); err == nil {
			t.Fatal("the process in the dead gorun's cgroup was not killed")
		}
		removed = append(removed, sweepJobCgroups(own)...)
	}
	if !slices.Contains(removed, gone) || slices.Contains(removed, alive) {
		t.Errorf("removed %v; want %s and not %s", removed, gone, alive)
	}
	if _, err := os.Stat(alive); err != nil {
		t.Errorf("the live pid's cgroup was removed: %v", err)
	}
}
