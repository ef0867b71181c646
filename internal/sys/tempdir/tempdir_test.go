package tempdir

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
	dead, err := Make(tmp, "gorun-dead-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead.path, "error.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Closing the lock is what the kernel does for a killed process.
	dead.lock.Close()
	live, err := Make(tmp, "gorun-live-")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove()
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

	removed, err := Sweep(context.Background(), tmp)
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
	if removed, err := Sweep(context.Background(), tmp); err != nil || !slices.Equal(removed, []string{live.path}) {
		t.Errorf("after release: removed %v, %v; want %s", removed, err, live.path)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Sweep(ctx, tmp); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled sweep: %v", err)
	}
}

func TestMakeTempDir(t *testing.T) {
	tmp := t.TempDir()
	d, err := Make(tmp, "gorun-x-")
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
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("removed folder: %v", err)
	}
}
