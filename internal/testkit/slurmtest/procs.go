package slurmtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// daemon is one of the cluster's long-running processes (munged,
// slurmctld, a slurmd), started in the foreground so that it is this
// process's child.
type daemon struct {
	name string
	cmd  *exec.Cmd
	out  string        // the file its stdout and stderr go to
	done chan struct{} // closed once it has exited and been reaped
}

// startDaemon starts argv with env, its output in dir/log/<name>.out.
func startDaemon(dir, name string, env []string, argv ...string) (*daemon, error) {
	out := filepath.Join(dir, "log", name+".out")
	f, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, f, f
	// Its own process group: a ^C at the terminal reaches the test, which
	// then stops the daemon itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(d.done)
	}()
	return d, nil
}

// exited reports whether the daemon has ended.
func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the daemon unless it has ended.
func (d *daemon) signal(sig syscall.Signal) {
	if !d.exited() {
		_ = d.cmd.Process.Signal(sig)
	}
}

// wait waits up to timeout for the daemon to end.
func (d *daemon) wait(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-d.done:
		return true
	case <-t.C:
		return false
	}
}

// stopDaemons sends SIGTERM to each daemon, then SIGKILL to those still
// running after grace; it returns the ones that did not end even then.
func stopDaemons(grace time.Duration, ds ...*daemon) []string {
	for _, d := range ds {
		d.signal(syscall.SIGTERM)
	}
	var stuck []string
	deadline := time.Now().Add(grace)
	for _, d := range ds {
		if d.wait(time.Until(deadline)) {
			continue
		}
		d.signal(syscall.SIGKILL)
		if !d.wait(5 * time.Second) {
			stuck = append(stuck, fmt.Sprintf("%s (pid %d)", d.name, d.cmd.Process.Pid))
		}
	}
	return stuck
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Process is a process running on a node.
type Process struct {
	PID     int
	Cmdline string // its arguments, separated by spaces
}

// String is "pid cmdline".
func (p Process) String() string { return strconv.Itoa(p.PID) + " " + p.Cmdline }

// nsLink is the namespace of kind ("net", "uts") that pid is in, as
// /proc/PID/ns/KIND names it ("net:[4026532290]"), "" if pid is gone.
func nsLink(pid int, kind string) string {
	l, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/" + kind)
	return l
}

// netnsLink is the link that names the network namespace mounted at
// /run/netns/name, "" if there is none.
func netnsLink(name string) string {
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+name, &st); err != nil {
		return ""
	}
	return "net:[" + strconv.FormatUint(st.Ino, 10) + "]"
}

// marks say which processes belong to a cluster: those in its network
// namespaces (held by their /run/netns mounts until the cluster is
// removed) and those whose environment holds env. (Not pids: once a
// daemon is reaped, its pid may be another program's. Not the daemons'
// UTS namespaces either: the kernel gives a freed namespace's number to
// the next one, and a cluster that ended took another cluster's new
// slurmctld, in a namespace of the reused number, for its own and killed
// it.)
type marks struct {
	namespaces map[string]bool // "net:[N]"
	env        []byte          // "SLURM_CONF=<the cluster's slurm.conf>"
}

// addLink marks a network namespace, unless it is this process's or
// init's.
func (m marks) addLink(link string) {
	if link == "" {
		return
	}
	for _, pid := range []int{os.Getpid(), 1} {
		if nsLink(pid, "net") == link {
			return
		}
	}
	m.namespaces[link] = true
}

// scan lists the live processes (not zombies) that match m, except this
// one.
func (m marks) scan() []Process {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var found []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || proctest.Gone(pid) {
			continue
		}
		if !m.namespaces[nsLink(pid, "net")] && !m.inEnv(pid) {
			continue
		}
		if p, ok := process(pid); ok {
			found = append(found, p)
		}
	}
	return found
}

func (m marks) inEnv(pid int) bool {
	if len(m.env) == 0 {
		return false
	}
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	for kv := range bytes.SplitSeq(data, []byte{0}) {
		if bytes.Equal(kv, m.env) {
			return true
		}
	}
	return false
}

// process reads pid's command line; false if it has ended.
func process(pid int) (Process, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || proctest.Gone(pid) {
		return Process{}, false
	}
	return Process{PID: pid, Cmdline: strings.TrimSpace(string(bytes.ReplaceAll(data, []byte{0}, []byte{' '})))}, true
}

// killAll sends SIGKILL to every process that list returns until it
// returns none or timeout passes; it returns those left.
func killAll(list func() []Process, timeout time.Duration) []Process {
	deadline := time.Now().Add(timeout)
	for {
		left := list()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		for _, p := range left {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}
