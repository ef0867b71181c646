package launcher

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/internal/sys/cgroup"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
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

// TestGuardianRunsBeforeAnyWorker: the guardian runs once newJobGroup
// returns (the agent waits for it before the first fork), so a gorun
// SIGKILLed right after a worker's fork still has its workers' process
// groups killed. It had been started after the first forks, and a kill
// in that window under load left a worker's children behind.
func TestGuardianRunsBeforeAnyWorker(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	g := newJobGroup(log, false)
	pids := guardians(t)
	g.close()
	if len(pids) != 1 {
		t.Fatalf("guardians running when newJobGroup returned: %v; want one", pids)
	}
	proctest.WaitGone(t, "the guardian told \"end\"", 20*time.Second, pids)
}

// guardians lists this process's children that run the guardian.
func guardians(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		cmdline, err2 := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || err2 != nil {
			continue
		}
		// ppid is the second field after the command's closing parenthesis.
		rest := string(stat[bytes.LastIndexByte(stat, ')')+2:])
		var state string
		var ppid int
		if _, err := fmt.Sscan(rest, &state, &ppid); err == nil && ppid == os.Getpid() && bytes.Contains(cmdline, []byte("gorun-guardian")) {
			out = append(out, pid)
		}
	}
	return out
}
