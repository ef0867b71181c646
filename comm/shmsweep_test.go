package comm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestSweepDeadRings: ring files whose creator is gone (a rank killed
// between creating its rings and its peer mapping them) are removed by
// the next set-up; a live creator's, a link, and other names are kept.
func TestSweepDeadRings(t *testing.T) {
	t.Parallel()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid, livePid := strconv.Itoa(dead.Process.Pid), strconv.Itoa(os.Getpid())
	dir := t.TempDir()
	ring := func(pid, dir string) string { return shmPrefix + pid + "-0123456789abcdef-0-1-0011223344556677-" + dir }
	files := map[string]bool{ // name: swept
		ring(deadPid, "up"):      true,
		ring(deadPid, "down"):    true,
		ring(livePid, "up"):      false,
		"gorun-" + deadPid:       false, // not a ring's name
		"other-" + ring("1", ""): false,
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	linkName := shmPrefix + deadPid + "-fedcba9876543210-0-1-0011223344556677-up"
	if err := os.Symlink(target, filepath.Join(dir, linkName)); err != nil {
		t.Fatal(err)
	}
	files[linkName] = false
	if n := sweepDeadRings(dir); n != 2 {
		t.Errorf("swept %d files; want 2", n)
	}
	for name, swept := range files {
		_, err := os.Lstat(filepath.Join(dir, name))
		if gone := os.IsNotExist(err); gone != swept {
			t.Errorf("%s: removed %v; want %v", name, gone, swept)
		}
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("the link's target: %v; want it kept", err)
	}
}
