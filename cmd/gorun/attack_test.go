package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// Attacks by another local user on a job of this user's (the job owner,
// root in CI): each is run from a second local account
// (proctest.OtherUser), and skipped loudly where it cannot be created.

// sharedTemp makes a folder that every user may write to, with the
// sticky bit, as /tmp: the temporary folder of an attacked job.
func sharedTemp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "attack-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// asOther runs the shell script as the other user and fails the test if
// it fails.
func asOther(t *testing.T, cred *syscall.Credential, script string) string {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-ec", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as %s: %s: %v\n%s", proctest.OtherUserName, script, err, out)
	}
	return string(out)
}

// ownersFolder makes a private folder of the job owner's, in the shared
// temporary folder, holding a file and an empty folder named as gorun's
// run folders are: what a sweep led astray would delete.
func ownersFolder(t *testing.T, tmp string) (dir string, precious []string) {
	t.Helper()
	dir = filepath.Join(tmp, "owners")
	for _, p := range []string{dir, filepath.Join(dir, "gorun-r1"), filepath.Join(dir, "gorun-r2")} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "gorun-r1", "notes.txt")
	if err := os.WriteFile(file, []byte("the owner's"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, []string{file, filepath.Join(dir, "gorun-r2")}
}

// TestSweepRefusesAnotherUsersFolder: the start-up sweep of the per-user
// flight-recorder folder deletes nothing of the owner's when another
// user put a link in that folder's place (a), or owns a real folder of
// that name whose entries lead to the owner's folders (b).
func TestSweepRefusesAnotherUsersFolder(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	for _, tc := range []struct {
		name, plant string // the other user's shell script; $B is the per-user folder's path, $O the owner's folder
		warning     string
	}{
		{"link", `ln -s "$O" "$B"`, "not a folder (a link"},
		{"folder of theirs", `mkdir -m 0777 "$B"; for i in 1 2 3; do ln -s "$O" "$B/gorun-x$i"; done; ln -s "$O/gorun-r2" "$B/gorun-r2"`, "belongs to user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tmp := sharedTemp(t)
			owners, precious := ownersFolder(t, tmp)
			base := filepath.Join(tmp, "gorun-flight-recorder-"+strconv.Itoa(os.Getuid()))
			asOther(t, cred, "B="+base+" O="+owners+"\n"+tc.plant)
			r := runGorun(t, testEnv("TMPDIR="+tmp), "--nproc-per-node=1", "--no-python", "true")
			if r.code != 0 {
				t.Fatalf("gorun exit %d\n%s", r.code, r.stderr)
			}
			for _, p := range precious {
				if _, err := os.Lstat(p); err != nil {
					t.Errorf("the owner's %s is gone: %v", p, err)
				}
			}
			if !strings.Contains(r.stderr, "not sweeping the flight-recorder folder") || !strings.Contains(r.stderr, tc.warning) {
				t.Errorf("want a warning that the sweep refused %s (%q)\n%s", base, tc.warning, r.stderr)
			}
		})
	}
}

// TestInheritedDescriptorsStayWithGorun: a descriptor open in the shell
// that started gorun (here a private file of the owner's, as fd 7)
// reaches no worker, warm Python interpreter or not: a worker gets
// stdin, stdout and stderr, as under torchrun.
func TestInheritedDescriptorsStayWithGorun(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("the owner's"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Each worker prints the targets of its descriptors other than 0-2
	// (and the listing's own).
	py := writePython(t, t.TempDir(), `import os
fds = os.listdir("/proc/self/fd")
for fd in fds:
    try:
        print("fd", fd, os.readlink("/proc/self/fd/" + fd))
    except OSError:
        pass
`)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no-python", []string{"--no-python", "/bin/sh", "-c", `for f in /proc/$$/fd/*; do echo fd ${f##*/} $(readlink $f); done`}},
		{"python", []string{py}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := append([]string{"--nproc-per-node=2"}, tc.args...)
			// As a shell would start it, with the file open as fd 7.
			cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", `exec "$0" "$@" 7<"$SECRET"`, gorunBin}, args...)...)
			cmd.Env = testEnv("PYTHON_EXEC="+testPython(t), "SECRET="+secret)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			r, err := runResult(cmd.Run(), &stdout, &stderr)
			if err != nil || r.code != 0 {
				t.Fatalf("gorun: %v, exit %d\n%s", err, r.code, r.stderr)
			}
			var fds []string
			for _, l := range strings.Split(r.stdout, "\n") {
				if _, l, ok := strings.Cut(l, "]:fd "); ok { // [default<rank>]:fd N TARGET
					fds = append(fds, l)
				}
			}
			if len(fds) < 6 {
				t.Fatalf("want each worker's descriptors listed; got\n%s", r.stdout)
			}
			for _, l := range fds {
				if strings.Contains(l, secret) || strings.HasPrefix(l, "7 ") {
					t.Errorf("a worker holds the shell's descriptor: %s", l)
				}
			}
		})
	}
}

// TestTraceOfAHostileFolder: gorun trace on a folder another user wrote
// reads no more than the folder holds: a dump claiming a world of 10^8
// ranks, or a rank outside its world, is refused by name, at once.
func TestTraceOfAHostileFolder(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	for _, tc := range []struct{ name, dump, want string }{
		{"world", `{"version":"2.10","rank":0,"world_size":100000000,"entries":[],"pg_status":{}}`, "world_size 100000000 is outside 0..1048576"},
		{"rank", `{"version":"2.10","rank":-5,"world_size":2,"entries":[],"pg_status":{}}`, "rank -5 is outside 0..1"},
		// 400 KB on disk, some 130 MB decoded; seven million took 7 GB.
		{"entries", `{"version":"2.10","rank":0,"world_size":2,"entries":[` + strings.Repeat("{},", 1<<17) + `{}],"pg_status":{}}`, `"entries" holds more than 131072 items`},
		// One entry's sizes: 13 MB on disk, 1.4 GB decoded at 64 MiB.
		// 1,024 groups x 65,536 entries: minutes of analysis, 200 KB.
		{"groups x entries", `{"version":"2.10","rank":0,"world_size":2,"entries":[` + strings.Repeat("{},", 1<<16-1) + `{}],"pg_status":{` + groupsJSON(1<<10) + `}}`, "the dumps hold 1024 process groups and 65536 entries"},
		{"values", `{"version":"2.10","rank":0,"world_size":2,"entries":[{"input_sizes":[` + strings.Repeat("[0],", 1<<22) + `[0]]}],"pg_status":{}}`, "holds more than 4194304 JSON values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tmp := sharedTemp(t)
			dir, src := filepath.Join(tmp, "dumps"), filepath.Join(tmp, "dump.json")
			if err := os.WriteFile(src, []byte(tc.dump), 0o644); err != nil {
				t.Fatal(err)
			}
			asOther(t, cred, "mkdir "+dir+"; cat "+src+" > "+dir+"/fr_trace_rank_0.json")
			r := runGorun(t, testEnv(), "trace", dir)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("gorun trace: exit %d; want 1 and %q\n%s%s", r.code, tc.want, r.stdout, r.stderr)
			}
		})
	}
}

// TestLogDirOfAnotherUser: a --log-dir in a folder that another user
// made (open to all, or with the sticky bit but theirs: either way they
// may rename what it holds) is refused before anything starts, naming
// that user, and gorun makes nothing in it.
func TestLogDirOfAnotherUser(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	for _, mode := range []string{"0777", "1777", "0755"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			shared := filepath.Join(sharedTemp(t), "shlogs")
			asOther(t, cred, "mkdir -m "+mode+" "+shared)
			for _, dir := range []string{shared, filepath.Join(shared, "mine")} {
				r := runGorun(t, testEnv(), "--log-dir="+dir, "--nproc-per-node=1", "--no-python", "true")
				if r.code != 2 || !strings.Contains(r.stderr, "belongs to user "+proctest.OtherUserName) {
					t.Errorf("--log-dir=%s: exit %d; want 2 and a refusal naming user %s\n%s", dir, r.code, proctest.OtherUserName, r.stderr)
				}
			}
			if entries, _ := os.ReadDir(shared); len(entries) > 0 {
				t.Errorf("gorun made %s in the other user's folder", entries[0].Name())
			}
		})
	}
}

// TestPlantedStopFileIsNoSuccess: workers that exit 0 while a stop file
// that gorun did not create is there (they may have stopped early on it)
// do not make the job a success.
func TestPlantedStopFileIsNoSuccess(t *testing.T) {
	t.Parallel()
	r := runGorun(t, testEnv(), "--nproc-per-node=1", "--no-python", "/bin/sh", "-c", `: > "$GORUN_STOP_FILE"`)
	if r.code != 1 || !strings.Contains(r.stderr, "no stop was requested") {
		t.Errorf("exit %d; want 1 and the stop file named\n%s", r.code, r.stderr)
	}
}

// TestErrorFileNotAFile: a failed worker's error file that is a FIFO, a
// link or a sparse file of 1 GiB is neither waited on, followed nor read
// whole: gorun reports the failure at once, as for a worker without one.
func TestErrorFileNotAFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, make string }{
		{"fifo", `mkfifo "$TORCHELASTIC_ERROR_FILE"`},
		{"link", `ln -s /dev/zero "$TORCHELASTIC_ERROR_FILE"`},
		{"sparse", `truncate -s 1G "$TORCHELASTIC_ERROR_FILE"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runGorun(t, testEnv(), "--nproc-per-node=1", "--no-python", "/bin/sh", "-c", tc.make+"; exit 3")
			if r.code != 3 || !strings.Contains(r.stderr, "exitcode  : 3") {
				t.Errorf("exit %d; want the worker's 3, in the summary too\n%s", r.code, r.stderr)
			}
		})
	}
}

// TestTempDirOthersCanSwapIn: a $TMPDIR in which another user could
// rename gorun's private folders (theirs, or open to all without the
// sticky bit) is refused, saying why.
func TestTempDirOthersCanSwapIn(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	for _, tc := range []struct{ mode, want string }{
		{"0777", "without the sticky bit"},
		{"1777", "belongs to user " + proctest.OtherUserName},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			tmp := filepath.Join(sharedTemp(t), "tmp")
			if tc.mode == "0777" { // this user's, open to all
				if err := os.Mkdir(tmp, 0o700); err != nil || os.Chmod(tmp, 0o777) != nil {
					t.Fatal(err)
				}
			} else {
				asOther(t, cred, "mkdir -m "+tc.mode+" "+tmp)
			}
			r := runGorun(t, testEnv("TMPDIR="+tmp), "--nproc-per-node=1", "--no-python", "true")
			if r.code == 0 || !strings.Contains(r.stderr, "($TMPDIR)") || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d; want a refusal of $TMPDIR (%q)\n%s", r.code, tc.want, r.stderr)
			}
		})
	}
}

// TestLogDirDotDotThroughALink: a --log-dir whose ".." follows a link
// of another user's is checked where the kernel resolves it (there: the
// other user's folder, refused), not where its text leads; one that
// resolves to a folder of the owner's is used at that one place, by
// gorun and its workers alike.
func TestLogDirDotDotThroughALink(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	tmp := sharedTemp(t)
	theirs := filepath.Join(tmp, "theirs")
	asOther(t, cred, "mkdir -m 0777 "+theirs+" "+theirs+"/x; ln -s "+theirs+"/x "+tmp+"/link")
	r := runGorun(t, testEnv(), "--log-dir="+tmp+"/link/../logs", "--nproc-per-node=1", "--no-python", "true")
	if r.code != 2 || !strings.Contains(r.stderr, theirs+" belongs to user "+proctest.OtherUserName) {
		t.Errorf("exit %d; want 2, refusing %s\n%s", r.code, theirs, r.stderr)
	}
	if entries, _ := os.ReadDir(theirs); len(entries) != 1 {
		t.Errorf("gorun made something in %s: %v", theirs, entries)
	}

	// The owner's own link: the run folder and the workers' files in one place.
	mine := filepath.Join(t.TempDir(), "mine")
	if err := os.MkdirAll(filepath.Join(mine, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(filepath.Join(mine, "x"), link); err != nil {
		t.Fatal(err)
	}
	r = runGorun(t, testEnv(), "--log-dir="+link+"/../logs", "--nproc-per-node=1", "--no-python", "/bin/sh", "-c", `echo "stop=$GORUN_STOP_FILE"`)
	if r.code != 0 || !strings.Contains(r.stdout, "stop="+filepath.Join(mine, "logs")+"/") {
		t.Errorf("exit %d; want 0 and the workers' files under %s\n%s%s", r.code, filepath.Join(mine, "logs"), r.stdout, r.stderr)
	}
}

// groupsJSON is n empty process groups' statuses, "0":{},"1":{},...
func groupsJSON(n int) string {
	g := make([]string, n)
	for i := range g {
		g[i] = `"` + strconv.Itoa(i) + `":{}`
	}
	return strings.Join(g, ",")
}
