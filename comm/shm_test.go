package comm

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRingOnAFullTmpfs: a ring that a real small tmpfs cannot hold is an
// error naming the folder, its size and what to do, and leaves no file
// (its first write used to kill the process with SIGBUS, and its file
// stayed). Root only: it mounts the tmpfs.
func TestRingOnAFullTmpfs(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("SKIPPED: mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		t.Skipf("SKIPPED: mount a 4 MiB tmpfs: %v", err)
	}
	// Detached at once, even while a process another test forks still
	// holds a descriptor of it for a moment: the folder's removal then
	// finds it empty (a plain unmount failed with EBUSY under load).
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	path := filepath.Join(dir, "ring")
	r, err := mapRing(path, true)
	if err == nil {
		r.unmap()
		t.Fatal("a ring of 8 MiB mapped on a 4 MiB tmpfs")
	}
	if !strings.Contains(err.Error(), dir+" is full (4 MiB") || !strings.Contains(err.Error(), "=tcp") {
		t.Errorf("error %q: want the folder, its size and the TCP way out", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left in the tmpfs: %v", left)
	}
}
