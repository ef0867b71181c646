package comm

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAcceptShmRefusesForeignNames: the higher rank of a pair maps only
// ring files named in this job's form for this pair, regular files of
// this user of the ring's size, never through a symbolic link.
func TestAcceptShmRefusesForeignNames(t *testing.T) {
	cfg := meshConfig{prefix: "pg//", rank: 1, size: 2, secret: testSecret}
	mine := func(a, b int) (string, string) {
		up, down, err := cfg.newShmNames(a, b)
		if err != nil {
			t.Fatal(err)
		}
		return up, down
	}
	dir := shmDir()
	// Real ring files of this job for the pair (0, 1).
	goodUp, goodDown := mine(0, 1)
	for _, n := range []string{goodUp, goodDown} {
		r, err := mapRing(filepath.Join(dir, n), true)
		if err != nil {
			t.Fatal(err)
		}
		r.unmap()
		t.Cleanup(func() { os.Remove(filepath.Join(dir, n)) })
	}
	// A well-named symbolic link to a ring file, and a well-named file of
	// the wrong size.
	linkUp, _ := mine(0, 1)
	if err := os.Symlink(filepath.Join(dir, goodUp), filepath.Join(dir, linkUp)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(dir, linkUp)) })
	smallUp, _ := mine(0, 1)
	if err := os.WriteFile(filepath.Join(dir, smallUp), []byte("small"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(dir, smallUp)) })
	otherJob := meshConfig{prefix: "pg//", secret: otherSecret(t)}
	foreignUp, _, _ := otherJob.newShmNames(0, 1)
	otherPairUp, _ := mine(0, 2)
	for _, tc := range []struct {
		name     string
		up, down string
		want     string // "": accepted
	}{
		{"/etc/passwd", "/etc/passwd", goodDown, "a path"},
		{"../x", "../x", goodDown, "a path"},
		{"parent in a name", goodUp[:10] + ".." + goodUp[12:], goodDown, "a path"},
		{"another form", "gorun-1-2-3", goodDown, "want a name gorun-<pid>-<16 hex digits>-0-1-<tag>-up"},
		{"another job's name", foreignUp, goodDown, "its tag is not this job's"},
		{"another pair's name", otherPairUp, goodDown, "for ranks 0 and 2"},
		{"up and down swapped", goodDown, goodUp, "want a name"},
		{"a symbolic link", linkUp, goodDown, "a symbolic link"},
		{"the wrong size", smallUp, goodDown, "want a ring file of"},
		{"this job's ring files", goodUp, goodDown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			here, there := net.Pipe()
			defer here.Close()
			go func() {
				defer there.Close()
				for _, n := range []string{tc.up, tc.down} {
					if writeString(there, n) != nil {
						return
					}
				}
				var ok [1]byte
				_, _ = there.Read(ok[:])
			}()
			m := &mesh{rank: 1, size: 2, cfg: cfg}
			p := &peer{rank: 0, conn: here}
			err := m.acceptShm(p)
			if tc.want == "" {
				if err != nil || p.shm == nil {
					t.Fatalf("refused: %v", err)
				}
				p.shm.close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want an error with %q", err, tc.want)
			}
			if p.shm != nil {
				t.Fatal("mapped anyway")
			}
		})
	}
}
