package launcher

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSweepTempDirs: only a gorun-* folder of this user with an owner
// file and a free lock is removed; a live one (locked), one without an
// owner file, a link and another prefix stay.
func TestSweepTempDirs(t *testing.T) {
	tmp := t.TempDir()
	dead, err := makeTempDir(tmp, "gorun-dead-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead.path, "error.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Closing the lock is what the kernel does for a killed process.
	dead.lock.Close()
	live, err := makeTempDir(tmp, "gorun-live-")
	if err != nil {
		t.Fatal(err)
	}
	defer live.remove()
	unmarked := filepath.Join(tmp, "gorun-unmarked")
	other := filepath.Join(tmp, "other-dir")
	target := t.TempDir()
	for _, d := range []string{unmarked, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(other, ownerFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A link to a marked, unlocked folder: the link is not followed.
	if err := os.WriteFile(filepath.Join(target, ownerFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(tmp, "gorun-link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}

	removed, err := sweepTempDirs(context.Background(), tmp)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{dead.path}) {
		t.Errorf("removed %v; want only %s", removed, dead.path)
	}
	for _, p := range []struct {
		path string
		kept bool
	}{
		{dead.path, false}, {live.path, true}, {unmarked, true}, {other, true}, {link, true},
		{filepath.Join(target, ownerFile), true},
	} {
		_, err := os.Lstat(p.path)
		if kept := err == nil; kept != p.kept {
			t.Errorf("%s kept %v; want %v", p.path, kept, p.kept)
		}
	}

	// The live gorun's folder goes once it is released.
	live.lock.Close()
	if removed, err := sweepTempDirs(context.Background(), tmp); err != nil || !slices.Equal(removed, []string{live.path}) {
		t.Errorf("after release: removed %v, %v; want %s", removed, err, live.path)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sweepTempDirs(ctx, tmp); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled sweep: %v", err)
	}
}

func TestMakeTempDir(t *testing.T) {
	tmp := t.TempDir()
	d, err := makeTempDir(tmp, "gorun-x-")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(d.path)
	if err != nil || fi.Mode().Perm() != 0o700 || !strings.HasPrefix(filepath.Base(d.path), "gorun-x-") {
		t.Fatalf("folder %s: %v, %v; want mode 0700", d.path, fi.Mode(), err)
	}
	if b, err := os.ReadFile(filepath.Join(d.path, ownerFile)); err != nil || strings.TrimSpace(string(b)) == "" {
		t.Errorf("owner file %q, %v; want this pid", b, err)
	}
	if err := d.remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("removed folder: %v", err)
	}
}

// TestPrivateDir: a fresh folder is made 0700; one already there is used
// only when it is this user's own private folder.
func TestPrivateDir(t *testing.T) {
	for _, tt := range []struct {
		name   string
		make   func(t *testing.T, path string)
		refuse string // in the error; "" to accept
	}{
		{"fresh", func(*testing.T, string) {}, ""},
		{"private already", func(t *testing.T, p string) { mkdir(t, p, 0o700) }, ""},
		{"open to others", func(t *testing.T, p string) { mkdir(t, p, 0o777) }, "mode 0777"},
		{"group writable", func(t *testing.T, p string) { mkdir(t, p, 0o770) }, "mode 0770"},
		{"a link", func(t *testing.T, p string) {
			target := t.TempDir()
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"a file", func(t *testing.T, p string) {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a folder"},
		{"another user's", func(t *testing.T, p string) {
			if os.Getuid() != 0 {
				t.Skip("needs root to give a folder to another user")
			}
			mkdir(t, p, 0o700)
			if err := os.Lchown(p, 4242, 4242); err != nil {
				t.Fatal(err)
			}
		}, "another user"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fr")
			tt.make(t, path)
			err := privateDir(path)
			switch {
			case tt.refuse == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.refuse != "" && (err == nil || !strings.Contains(err.Error(), tt.refuse)):
				t.Fatalf("err %v; want one saying %q", err, tt.refuse)
			case tt.refuse == "":
				if fi, err := os.Lstat(path); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
					t.Errorf("%v, %v; want a 0700 folder", fi.Mode(), err)
				}
			}
		})
	}
}

func mkdir(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Mkdir(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

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
