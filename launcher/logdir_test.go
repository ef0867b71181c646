package launcher

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/rendezvous"
)

// TestLogLayoutRefusesRunIDs: a run id that could move a path ('/'), or
// holds control characters or no UTF-8 text, never builds one.
func TestLogLayoutRefusesRunIDs(t *testing.T) {
	logDir := t.TempDir()
	for _, id := range []string{"../../x", "a/b", "", strings.Repeat("a", 200), "line\nbreak", "nul\x00", "\xff\xfe"} {
		if l, err := newLogLayout(logDir, id); !errors.Is(err, rendezvous.ErrInvalidRunID) {
			if l != nil {
				l.close()
			}
			t.Errorf("run id %q: %v; want %v", id, err, rendezvous.ErrInvalidRunID)
		}
		cfg := NewConfig()
		cfg.Entrypoint.Script, cfg.RunID = "train.py", id
		var bad *setting.Error
		if err := cfg.Validate(); !errors.Is(err, rendezvous.ErrInvalidRunID) || !errors.As(err, &bad) || bad.Setting != "RunID" || !strings.Contains(err.Error(), "RunID=") {
			t.Errorf("Validate with run id %q: %v; want one naming RunID", id, err)
		}
	}
	if left, _ := os.ReadDir(logDir); len(left) != 0 {
		t.Errorf("left in --log-dir: %v", left)
	}
}

// TestLogLayoutTakesTorchrunRunIDs: what torchrun takes as a run id names
// a run folder <run_id>_<random> inside --log-dir, as torchrun's does.
func TestLogLayoutTakesTorchrunRunIDs(t *testing.T) {
	logDir := t.TempDir()
	for _, id := range []string{"job:42", "my job", "..", ".hidden", "-x", "4242.0", "none", "ünï", "x*y"} {
		l, err := newLogLayout(logDir, id)
		if err != nil {
			t.Errorf("run id %q: %v", id, err)
			continue
		}
		if filepath.Dir(l.root) != logDir || !strings.HasPrefix(filepath.Base(l.root), id+"_") {
			t.Errorf("run id %q: run folder %s; want %s/%s_<random>", id, l.root, logDir, id)
		}
		l.close()
		cfg := NewConfig()
		cfg.Entrypoint.Script, cfg.RunID = "train.py", id
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate with run id %q: %v", id, err)
		}
	}
}

// TestLogLayoutModes: the run's folders are 0700, log files 0600, and a
// file or link already at a log's name is never written through.
func TestLogLayoutModes(t *testing.T) {
	logDir := t.TempDir()
	l, err := newLogLayout(logDir, "job")
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if err := l.prepareAttempt(0, 2); err != nil {
		t.Fatal(err)
	}
	f, err := l.createStream(0, 1, "stdout")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, p := range []struct {
		path string
		mode fs.FileMode
	}{
		{".", 0o700}, {"attempt_0", 0o700}, {"attempt_0/0", 0o700}, {"attempt_0/1/stdout.log", 0o600},
	} {
		fi, err := os.Lstat(filepath.Join(l.root, p.path))
		if err != nil || fi.Mode().Perm() != p.mode {
			t.Errorf("%s: %v, %v; want %04o", p.path, fi.Mode(), err, p.mode)
		}
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, l.streamFile(0, 0, "stderr")); err != nil {
		t.Fatal(err)
	}
	if f, err := l.createStream(0, 0, "stderr"); err == nil {
		f.Close()
		t.Error("a log was opened through a link")
	}
	if f, err := l.createStream(0, 1, "stdout"); err == nil {
		f.Close()
		t.Error("an existing log was opened again")
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
}

// TestLogLayoutNeverUsesPlanted: folders or links already in --log-dir
// under the run id's names are left alone: the run makes a new folder.
func TestLogLayoutNeverUsesPlanted(t *testing.T) {
	logDir := t.TempDir()
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(logDir, "job")); err != nil {
		t.Fatal(err)
	}
	mkdir(t, filepath.Join(logDir, "job_1"), 0o777)
	l, err := newLogLayout(logDir, "job")
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if base := filepath.Base(l.root); !strings.HasPrefix(base, "job_") || base == "job_1" {
		t.Errorf("run folder %s; want a new job_<random>", l.root)
	}
	if err := l.prepareAttempt(0, 1); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(elsewhere); len(left) != 0 {
		t.Errorf("written through the planted link: %v", left)
	}
}

// TestPrepareAttemptRemovesOnlyItsOwn: an attempt folder this run made
// moves aside (attempt_<n>.rerun_<k>) for a rerun of the attempt; one it
// did not make is an error, and nothing in it is removed.
func TestPrepareAttemptRemovesOnlyItsOwn(t *testing.T) {
	l, err := newLogLayout(t.TempDir(), "job")
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if err := l.prepareAttempt(0, 1); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(l.rankDir(0, 0), "stdout.log")
	if err := os.WriteFile(old, []byte("round 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A membership change reruns attempt 0: the earlier round's log is
	// kept beside the new, empty folder (it used to be removed).
	for k := 1; k <= 2; k++ {
		if err := l.prepareAttempt(0, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("rerun %d of attempt 0 starts with the old log: %v", k, err)
		}
		kept := filepath.Join(l.root, "attempt_0.rerun_"+strconv.Itoa(k), "0", "stdout.log")
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("rerun %d: the earlier round's log is not kept: %v", k, err)
		}
		os.WriteFile(old, nil, 0o600)
	}
	foreign := filepath.Join(l.root, "attempt_1", "keep")
	if err := os.MkdirAll(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := l.prepareAttempt(1, 1); err == nil {
		t.Error("an attempt folder this run did not make was used")
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("removed what this run did not make: %v", err)
	}
}

// TestTempLayoutDumpDir: without --log-dir, dumps go to this user's
// private folder, or to a fresh private one when another user holds its
// name; the run's dump folders that stayed empty go with the run.
func TestTempLayoutDumpDir(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	l, err := newLogLayout("", "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.prepareAttempt(0, 1); err != nil {
		t.Fatal(err)
	}
	dir, warn, err := l.dumpDir(0)
	if err != nil || warn != "" || !strings.HasPrefix(dir, private.FlightRecorderBase()+string(filepath.Separator)) {
		t.Fatalf("dumpDir = %s, %q, %v; want one under %s", dir, warn, err, private.FlightRecorderBase())
	}
	if fi, err := os.Lstat(private.FlightRecorderBase()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, %v; want 0700", private.FlightRecorderBase(), fi.Mode(), err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil { // as the watchdog does
		t.Fatal(err)
	}
	root := l.root
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{root, filepath.Dir(dir), private.FlightRecorderBase()} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}

	// Dumps outlive the run.
	l, err = newLogLayout("", "job")
	if err != nil {
		t.Fatal(err)
	}
	if dir, _, err = l.dumpDir(0); err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(dir, "fr_trace_rank_0.json")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dump, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	l.close()
	if _, err := os.Stat(dump); err != nil {
		t.Errorf("the run's dump went with it: %v", err)
	}

	// Another user's folder (here: one open to everyone) is not used.
	if err := os.Chmod(private.FlightRecorderBase(), 0o777); err != nil {
		t.Fatal(err)
	}
	l, err = newLogLayout("", "job")
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	dir, warn, err = l.dumpDir(0)
	if err != nil || !strings.Contains(warn, "0777") || strings.HasPrefix(dir, private.FlightRecorderBase()+string(filepath.Separator)) {
		t.Fatalf("dumpDir = %s, %q, %v; want a fresh folder and a warning", dir, warn, err)
	}
	if fi, err := os.Lstat(filepath.Dir(filepath.Dir(dir))); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("fallback folder: %v, %v; want 0700", fi.Mode(), err)
	}
}

// A --log-dir where another user could swap the run's folder is refused:
// group- or world-writable without the sticky bit. With the sticky bit,
// as /tmp, it is not.
func TestLogDirOthersCanWrite(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o755, true}, {0o700, true}, {0o777, false}, {0o775, false}, {0o777 | os.ModeSticky, true}} {
		dir := filepath.Join(t.TempDir(), "logs")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, tc.mode); err != nil {
			t.Fatal(err)
		}
		l, err := newLogLayout(dir, "job")
		if (err == nil) != tc.ok {
			t.Errorf("mode %v: %v; want ok=%v", tc.mode, err, tc.ok)
		}
		if err == nil {
			l.close()
		} else if !strings.Contains(err.Error(), "could replace the run's folder") {
			t.Errorf("mode %v: %v; want why", tc.mode, err)
		}
	}
}

// The whole path counts: a folder above --log-dir owned by another user,
// or a link on the path that another user owns, would let that user swap
// the run's folder. (Needs root, to give files away.)
func TestLogDirPathOfAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("!!!!!!!! SKIPPED: giving a file to another user needs root")
	}
	const nobody = 65534
	base := t.TempDir()
	theirs := filepath.Join(base, "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(base, "mine")
	if err := os.Mkdir(mine, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(mine, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir, want string
	}{
		{filepath.Join(theirs, "new", "logs"), "uid 65534"}, // not there yet: made under theirs
		{filepath.Join(theirs, "."), "uid 65534"},
		{filepath.Join(link, "logs"), "is a link owned by "},
	} {
		if err := CheckLogDir(tc.dir); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.dir, err, tc.want)
		}
	}
	if err := CheckLogDir(filepath.Join(mine, "new", "logs")); err != nil {
		t.Errorf("a path of this user's own: %v", err)
	}
}
