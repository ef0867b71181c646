package launcher

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/internal/sys/cgroup"
)

// A worker's own children (a shell's sleep, a data loader) are not
// reached by the parent-death signal, which goes to the direct child
// only. jobGroup keeps every descendant of the workers from outliving
// gorun, a SIGKILLed gorun included, with two means:
//
//   - a cgroup v2 of the job's own, where the machine lets gorun make one
//     below its own cgroup: every worker is cloned into it
//     (CLONE_INTO_CGROUP), and so is everything it starts, even a process
//     that leaves the worker's process group (setsid); cgroup.kill ends
//     them all at once;
//   - a guardian, a small shell process outside the job, that gorun tells
//     each worker's process group and that holds the read end of a pipe
//     whose write end only gorun has. When gorun ends without saying so
//     (the pipe's end-of-file without "end"), the guardian kills the
//     cgroup and the process groups, then removes the cgroup.
//
// Without a writable cgroup v2, the process groups remain: a descendant
// that made its own session (setsid) escapes them. Without /bin/sh, there
// is no guardian, and a SIGKILLed gorun leaves the workers' children.
type jobGroup struct {
	log logrus.FieldLogger

	// cgroup is the job's cgroup directory, "" when there is none; cgfd
	// its open directory, for CLONE_INTO_CGROUP.
	cgroup string
	cgfd   *os.File

	mu    sync.Mutex
	guard *os.File // the guardian's pipe, nil when there is no guardian
	// kept are processes of the cgroup that are not leftovers: the warm
	// interpreters waiting for their round (warm.go).
	kept map[int]bool
}

// guardianScript is the guardian's program: $1 is the job's cgroup ("" for
// none). It reads "+PGID" and "-PGID" lines while gorun lives. "end" means
// gorun ended the workers' process groups itself: the guardian only ends
// what is left in the cgroup and removes it, off gorun's way out. The
// end of the pipe without "end" means gorun is gone: it kills the cgroup
// and the process groups.
const guardianScript = `trap '' INT TERM HUP QUIT PIPE USR1 USR2
set -f
g=" "
done=
while read -r op; do
  case $op in
    end) done=1; break ;;
    +*) g="$g${op#+} " ;;
    -*) n=" "; for p in $g; do [ "$p" = "${op#-}" ] || n="$n$p "; done; g=$n ;;
  esac
done
[ -n "$1" ] && echo 1 > "$1/cgroup.kill" 2>/dev/null
if [ -z "$done" ]; then
  for p in $g; do kill -KILL "-$p" 2>/dev/null; done
fi
if [ -n "$1" ]; then
  i=0
  while ! rmdir "$1" 2>/dev/null && [ -d "$1" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
fi
`

// EnvJobCgroup set to 0 keeps gorun from making a cgroup for the job (the
// guardian and the process groups remain), for machines whose cgroup
// delegation misbehaves.
const EnvJobCgroup = "GORUN_JOB_CGROUP"

// newJobGroup makes the job's cgroup where it can (and useCgroup allows)
// and starts the guardian. The agent makes it in the background at its
// start and waits for it before the first worker's fork: a gorun
// SIGKILLed at any moment after that fork leaves nothing behind.
func newJobGroup(log logrus.FieldLogger, useCgroup bool) *jobGroup {
	g := &jobGroup{log: log}
	if !useCgroup {
		log.Debugf("%s=0: no cgroup of the job's own", EnvJobCgroup)
	} else if dir, err := makeJobCgroup(); err == nil {
		if fd, err := os.Open(dir); err == nil {
			g.cgroup, g.cgfd = dir, fd
		} else {
			os.Remove(dir)
		}
	} else {
		log.Debugf("no cgroup of the job's own (%v): a worker's descendants that leave its process group may outlive a SIGKILLed gorun", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		log.Warnf("no guardian for the workers' descendants: %v", err)
		return g
	}
	g.guard = w
	g.startGuardian(r, g.cgroup)
	return g
}

// startGuardian starts the guardian of cgroup ("" for none) on the
// pipe's read end r, and a goroutine that reaps it when it ends (once
// told "end", or when gorun is gone).
func (g *jobGroup) startGuardian(r *os.File, cgroup string) {
	cmd := exec.Command("/bin/sh", "-c", guardianScript, "gorun-guardian", cgroup)
	cmd.Stdin = r
	// Its own session: a terminal's ^C to gorun's group does not reach it,
	// it outlives gorun by design, and a ^Z during its fork cannot stop it
	// before its exec (and gorun with it: internal/sys/proc, Options.Setsid).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err := cmd.Start()
	r.Close()
	if err != nil {
		g.log.Warnf("no guardian for the workers' descendants (%v): a SIGKILLed gorun may leave them", err)
		g.guard.Close()
		g.guard = nil
		return
	}
	go func() { _ = cmd.Wait() }()
}

// say writes one line to the guardian.
func (g *jobGroup) say(line string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.guard == nil {
		return
	}
	if _, err := g.guard.WriteString(line + "\n"); err != nil {
		g.log.Warnf("guardian of the workers' descendants: %v", err)
		g.guard.Close()
		g.guard = nil
	}
}

// started records a worker's process group.
func (g *jobGroup) started(pgid int) { g.say("+" + strconv.Itoa(pgid)) }

// ended forgets a worker's process group, once gorun has killed it.
func (g *jobGroup) ended(pgid int) { g.say("-" + strconv.Itoa(pgid)) }

// keep marks pid as no leftover of an attempt (killLeftovers spares it).
func (g *jobGroup) keep(pid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.kept == nil {
		g.kept = map[int]bool{}
	}
	g.kept[pid] = true
}

// unkeep undoes keep.
func (g *jobGroup) unkeep(pid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.kept, pid)
}

// isKept says whether pid was kept.
func (g *jobGroup) isKept(pid int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.kept[pid]
}

// cgroupFD is the job's cgroup for CLONE_INTO_CGROUP, or -1.
func (g *jobGroup) cgroupFD() int {
	if g.cgfd == nil {
		return -1
	}
	return int(g.cgfd.Fd())
}

// noCgroup gives the cgroup up: a clone into it failed with err (the
// worker was started outside it).
func (g *jobGroup) noCgroup(err error) {
	if g.cgfd == nil {
		return
	}
	g.log.Warnf("cannot start workers in the job's cgroup %s (%v): using process groups only", g.cgroup, err)
	g.cgfd.Close()
	os.Remove(g.cgroup)
	g.cgroup, g.cgfd = "", nil
}

// close ends what is left of the job (processes the workers left behind)
// and removes the cgroup: the guardian does it once told "end", so that a
// job's end does not wait for the kernel to take the cgroup down; without
// a guardian, close does it itself.
func (g *jobGroup) close() {
	g.say("end")
	g.mu.Lock()
	guarded := g.guard != nil
	if guarded {
		g.guard.Close()
		g.guard = nil
	}
	g.mu.Unlock()
	if g.cgroup != "" {
		g.cgfd.Close()
		if !guarded {
			g.removeCgroup()
		}
	}
	// The guardian exits by itself and its goroutine reaps it: waiting
	// here would add its work to a short job's end.
}

// killLeftovers kills what the workers left in the job's cgroup once they
// have all exited (but the kept processes, the warm interpreters): descendants that left their process groups (setsid),
// which would otherwise hold the workers' output open and outlive the
// attempt into the next one. It does nothing without a cgroup (those
// descendants then go when the job ends or gorun dies). Each is killed by
// its pid, read from the cgroup (only this job's processes are there):
// cgroup.kill would also kill the next attempt's workers, cloned into the
// cgroup while the killed ones are still exiting.
func (g *jobGroup) killLeftovers() {
	if g == nil || g.cgroup == "" {
		return
	}
	killed := map[int]bool{}
	// A leftover may fork while it is being killed: read again until no
	// new pid shows up.
	for range 10 {
		procs, err := os.ReadFile(filepath.Join(g.cgroup, "cgroup.procs"))
		if err != nil {
			g.log.Warnf("end the processes the workers left behind: %v", err)
			return
		}
		found := false
		for _, f := range strings.Fields(string(procs)) {
			pid, err := strconv.Atoi(f)
			if err != nil || killed[pid] || g.isKept(pid) {
				continue
			}
			found, killed[pid] = true, true
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if !found {
			break
		}
	}
	if len(killed) > 0 {
		g.log.Infof("ended %d processes the workers left behind (they had left the workers' process groups)", len(killed))
	}
}

// cgroupEmptyTimeout bounds how long removeCgroup waits for the cgroup
// to empty.
const cgroupEmptyTimeout = 2 * time.Second

// removeCgroup kills what is left in the job's cgroup and removes it.
func (g *jobGroup) removeCgroup() {
	if err := os.WriteFile(filepath.Join(g.cgroup, "cgroup.kill"), []byte("1"), 0); err != nil {
		g.log.Warnf("end the job's leftover processes: %v", err)
	}
	deadline := time.Now().Add(cgroupEmptyTimeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := syscall.Rmdir(g.cgroup)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			g.log.Warnf("remove the job's cgroup %s: %v", g.cgroup, err)
			return
		}
		time.Sleep(delay) // the killed processes are exiting; the kernel gives no event to wait on here
	}
}

// makeJobCgroup makes a cgroup v2 for the job below this process's own.
func makeJobCgroup() (string, error) {
	own, err := cgroup.Own()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(own, "gorun-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(time.Now().UnixNano()%1e9, 36))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		os.Remove(dir)
		return "", fmt.Errorf("no cgroup.kill (Linux 5.14 or later has it): %w", err)
	}
	return dir, nil
}

// sweepJobCgroups removes, from parent, the job cgroups (gorun-<pid>-*)
// of gorun processes that are gone and whose guardian did not remove
// them (a gorun killed before its first workers started, or a killed
// guardian), ending first whatever is left in them. A cgroup whose pid
// is alive is kept, even if that pid is now another program's. It returns
// the cgroups removed.
func sweepJobCgroups(parent string) []string {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "gorun-")
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // alive (or not ours to ask about)
		}
		dir := filepath.Join(parent, e.Name())
		if syscall.Rmdir(dir) != nil {
			_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
			if syscall.Rmdir(dir) != nil {
				continue // still emptying: the next sweep
			}
		}
		removed = append(removed, dir)
	}
	return removed
}
