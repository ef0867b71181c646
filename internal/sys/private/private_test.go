package private

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDir: a fresh folder is made 0700; one already there is used
// only when it is this user's own private folder.
func TestDir(t *testing.T) {
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
			err := Dir(path)
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

// TestMkdirAllFollowsNoLink: the folders MkdirAll makes are made inside
// their parents through handles: a link in the way (another user's, in a
// folder others may write) is refused and nothing is made where it
// points; the folders it makes are made.
func TestMkdirAllFollowsNoLink(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(dir, "link", "logs", "run"), 0o755); err == nil {
		t.Error("MkdirAll through a link: no error")
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) > 0 {
		t.Errorf("made %s where the link points", entries[0].Name())
	}
	made := filepath.Join(dir, "a", "b", "c")
	if err := MkdirAll(made, 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(made); err != nil || !fi.IsDir() {
		t.Errorf("%s: %v; want a folder", made, err)
	}
}
