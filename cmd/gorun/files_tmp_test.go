package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// gorunFolders lists the gorun-* folders in dir, but for the per-user
// folder of flight-recorder dumps.
func gorunFolders(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "gorun-*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range m {
		if !strings.HasPrefix(filepath.Base(d), "gorun-flight-recorder-") {
			out = append(out, d)
		}
	}
	return out
}

// TestKilledGorunFoldersSwept: gorun killed with SIGKILL leaves its
// temporary folders (its error files, the --standalone store's data);
// the next gorun of the user removes them, and never a live gorun's.
func TestKilledGorunFoldersSwept(t *testing.T) {
	t.Parallel()
	tmp, work := t.TempDir(), t.TempDir()
	env := testEnv("TMPDIR=" + tmp)
	hold := writeScript(t, `touch "$1/ready.$2"; exec sleep 300`)

	killed, _, _ := startGorun(t, env, "--standalone", "--no-python", hold, work, "killed")
	waitFor(t, "the first gorun's worker", func() bool {
		_, err := os.Stat(filepath.Join(work, "ready.killed"))
		return err == nil
	})
	left := gorunFolders(t, tmp)
	if len(left) != 2 {
		t.Fatalf("temporary folders %v; want the error files' and the store's", left)
	}
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExit(t, killed)

	// A live gorun's folders survive the sweep of another.
	live, _, _ := startGorun(t, env, "--no-python", hold, work, "live")
	waitFor(t, "the live gorun's worker", func() bool {
		_, err := os.Stat(filepath.Join(work, "ready.live"))
		return err == nil
	})
	var liveDirs []string
	for _, d := range gorunFolders(t, tmp) {
		if !contains(left, d) {
			liveDirs = append(liveDirs, d)
		}
	}
	if len(liveDirs) != 1 {
		t.Fatalf("the live gorun's folders: %v; want one", liveDirs)
	}

	r := runGorun(t, env, "--no-python", "/bin/true")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	proctest.WaitFor(t, "the killed gorun's folders to go", 30*time.Second, func() bool {
		for _, d := range left {
			if _, err := os.Lstat(d); err == nil {
				return false
			}
		}
		return true
	})
	if _, err := os.Stat(liveDirs[0]); err != nil {
		t.Errorf("a live gorun's folder was removed: %v", err)
	}
	if err := live.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, live)
	// Nothing is left, not even the killed gorun's empty dump folder.
	if rest, _ := os.ReadDir(tmp); len(rest) != 0 {
		t.Errorf("left in TMPDIR: %v", rest)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestLogFilesArePrivate: under --log-dir the run's folders are 0700 and
// the log files 0600; a run without --log-dir makes only private folders.
func TestLogFilesArePrivate(t *testing.T) {
	t.Parallel()
	logDir := filepath.Join(t.TempDir(), "logs")
	// Local rank 1 writes and ends first; rank 0 fails only then, so that
	// stopping the job cuts no output short.
	marker := filepath.Join(t.TempDir(), "rank1-done")
	script := writeScript(t, `echo out; echo err >&2
if [ "$LOCAL_RANK" = 1 ]; then touch `+marker+`; exit 0; fi
while [ ! -e `+marker+` ]; do sleep 0.01; done
echo '{"message": "x"}' > "$TORCHELASTIC_ERROR_FILE"; exit 1`)
	r := runGorun(t, testEnv(), "--nproc-per-node=2", "--log-dir", logDir, "--rdzv-id=j", "--tee=3", "--no-python", script)
	if r.code != 1 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var n int
	err := filepath.WalkDir(runFolder(t, logDir, "j"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o700)
		if !d.IsDir() {
			want = 0o600
			n++
		}
		// error.json is the worker's own: the folders keep it private.
		if fi.Mode().Perm() != want && d.Name() != "error.json" {
			t.Errorf("%s: mode %04o; want %04o", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil || n < 4 {
		t.Fatalf("%d files, %v; want the 4 logs", n, err)
	}
	for lr := range 2 {
		b, err := os.ReadFile(filepath.Join(runFolder(t, logDir, "j"), "attempt_0", strconv.Itoa(lr), "stdout.log"))
		if err != nil || string(b) != "out\n" {
			t.Errorf("local rank %d stdout.log = %q, %v", lr, b, err)
		}
	}
}

// TestKilledStoreHostSwept: the agent hosting a c10d job's embedded store,
// killed with SIGKILL (Slurm's scancel --signal=KILL, KillWait's end, the
// OOM killer), leaves the store's data; the next gorun of the user removes
// it with the agent's other folders.
func TestKilledStoreHostSwept(t *testing.T) {
	t.Parallel()
	tmp, work := t.TempDir(), t.TempDir()
	env := testEnv("TMPDIR=" + tmp)
	hold := writeScript(t, `touch "$1/ready.$2"; exec sleep 300`)
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	host, _, errb := startGorun(t, env, "--rdzv-backend=c10d", "--rdzv-endpoint="+ep, "--rdzv-id=swept",
		"--nnodes=1:2", "--rdzv-conf=last_call_timeout=0.1", "--no-python", hold, work, "host")
	waitFor(t, "the store host's worker", func() bool {
		_, err := os.Stat(filepath.Join(work, "ready.host"))
		return err == nil
	})
	left := gorunFolders(t, tmp)
	var store bool
	for _, d := range left {
		store = store || strings.HasPrefix(filepath.Base(d), "gorun-store-")
	}
	if !store {
		t.Fatalf("temporary folders %v; want the store's data among them\n%s", left, errb)
	}
	if err := host.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExit(t, host)
	if r := runGorun(t, env, "--no-python", "/bin/true"); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	proctest.WaitFor(t, "the killed store host's folders to go", 30*time.Second, func() bool {
		return len(gorunFolders(t, tmp)) == 0
	})
}

// TestLogDirOthersCanWriteIsRefused: a --log-dir where another user could
// swap the run's folder (world-writable, no sticky bit) is bad input.
func TestLogDirOthersCanWriteIsRefused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	r := runGorun(t, testEnv(), "--log-dir", dir, "--no-python", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "could replace the run's folder") {
		t.Errorf("exit %d; want 2 and why\n%s", r.code, r.stderr)
	}
}
