package proc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/leakcheck"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m, 5*time.Second)) }

// sh returns a command builder for /bin/sh -c script.
func sh(script string) func() *exec.Cmd {
	return func() *exec.Cmd { return exec.Command("/bin/sh", "-c", script) }
}

// statField reads field n (1-based, as proc(5) counts) of /proc/pid/stat.
func statField(t *testing.T, pid, n int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	return statFieldOf(b, n)
}

// statFieldOf is field n of a /proc/pid/stat line.
func statFieldOf(stat []byte, n int) string {
	// The command name (field 2) may hold spaces: count after its ')'.
	rest := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	return rest[n-3]
}

func TestStartSetsSessionNiceAndParentDeathSignal(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      Options
		ownSess   bool
		wantNice  string
		wantGroup bool
	}{
		{name: "own session, nice 19", opts: Options{Setsid: true, Nice: 19}, ownSess: true, wantNice: "19"},
		{name: "gorun's session", opts: Options{}, wantNice: strconv.Itoa(niceOfThisProcess(t))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, started := Start(sh("exec sleep 60"), tc.opts)
			if err := <-started; err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Signal(syscall.SIGKILL); <-p.Done() })
			sid, err := getsid(p.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if got := sid == p.Pid; got != tc.ownSess {
				t.Errorf("session %d of pid %d: own session %v, want %v", sid, p.Pid, got, tc.ownSess)
			}
			if got := statField(t, p.Pid, 19); got != tc.wantNice {
				t.Errorf("nice %s, want %s", got, tc.wantNice)
			}
		})
	}
}

// niceOfThisProcess is the nice value a child inherits by default.
func niceOfThisProcess(t *testing.T) int {
	n, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	return 20 - n // the raw syscall returns 20 - nice
}

func getsid(pid int) (int, error) {
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(sid), nil
}

func TestExitIsReportedOnce(t *testing.T) {
	exited := make(chan *Process, 2)
	p, started := Start(sh("exit 7"), Options{Exited: func(p *Process) { exited <- p }})
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if got := <-exited; got != p {
		t.Fatalf("Exited got %p, want %p", got, p)
	}
	if !p.Exited() {
		t.Fatal("Exited() false after the Exited callback")
	}
	// The zero Options ask for no cgroup: none was tried.
	if p.CgroupErr != nil {
		t.Errorf("CgroupErr %v with no cgroup asked for", p.CgroupErr)
	}
	state, at := p.State()
	if state == nil || state.ExitCode() != 7 || at.IsZero() {
		t.Fatalf("state %v at %v, want exit code 7 and a time", state, at)
	}
	// A reaped process's pid may belong to another process now.
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Errorf("Signal after the exit: %v, want nil", err)
	}
	if len(exited) != 0 {
		t.Errorf("Exited called %d more times", len(exited))
	}
}

func TestStartErrors(t *testing.T) {
	// A descriptor that is no cgroup directory.
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	notCgroup := int(devnull.Fd())
	for _, tc := range []struct {
		name    string
		command func() *exec.Cmd
		opts    Options
		want    error
		cgroup  bool
	}{
		{name: "missing program", command: func() *exec.Cmd { return exec.Command("/nonexistent/gorun-test") }, opts: Options{}, want: os.ErrNotExist},
		// A descriptor that is no cgroup: the process starts outside it,
		// and says why.
		{name: "bad cgroup", command: sh("exit 0"), opts: Options{CgroupFD: notCgroup}, cgroup: true},
		{name: "missing program, bad cgroup", command: func() *exec.Cmd { return exec.Command("/nonexistent/gorun-test") }, opts: Options{CgroupFD: notCgroup}, want: os.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, started := Start(tc.command, tc.opts)
			err := <-started
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("start: %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			<-p.Done()
			if got := p.CgroupErr != nil; got != tc.cgroup {
				t.Errorf("CgroupErr %v, want set %v", p.CgroupErr, tc.cgroup)
			}
		})
	}
}

func TestSignalGroupReachesTheGroup(t *testing.T) {
	// The shell leads the group and, on SIGTERM, reports how its child
	// (in the same group) ended: 143 when the signal reached it too.
	p, started := Start(sh(`trap 'wait $!; exit $?' TERM; sleep 60 & wait $!`), Options{Setsid: true})
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) })
	// Wait until the shell's child runs sleep: the group has a member
	// that is sleep. (Two members is too early: the child forked, not yet
	// exec'd, may still hold the shell's trap, take the SIGTERM, and the
	// shell then reports the sleep's 0 a minute later; seen under load.)
	proctest.WaitFor(t, "the shell's child", 10*time.Second, func() bool { return groupHas(t, p.Pid, "sleep") })
	if err := p.SignalGroup(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if state, _ := p.State(); state.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("the shell reported %v; want its child killed by SIGTERM (exit status 143)", state)
	}
	if err := p.SignalGroup(syscall.SIGTERM); err != nil {
		t.Errorf("SignalGroup of a gone group: %v, want nil", err)
	}
}

// groupSize counts the processes of process group pgid.
// groupHas says whether a process of group pgid runs the program comm
// (its /proc/PID/comm).
func groupHas(t *testing.T, pgid int, comm string) bool {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil || len(b) == 0 || statFieldOf(b, 5) != strconv.Itoa(pgid) {
			continue
		}
		if c, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(c)) == comm {
			return true
		}
	}
	return false
}

// TestParentDeathKillsTheChild runs a helper (this test binary) that
// starts a child and is then killed outright: the child must die with it.
func TestParentDeathKillsTheChild(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("the helper's own run")
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperStartsASleeper$")
	helper.Env = append(os.Environ(), helperEnv+"=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = helper.Process.Kill()
		_ = helper.Wait()
		t.Fatalf("the helper said nothing: %v", err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "child ")))
	if err != nil {
		t.Fatalf("the helper said %q", line)
	}
	t.Cleanup(func() {
		if !proctest.Gone(child) {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
	})
	_ = helper.Process.Kill()
	_ = helper.Wait()
	proctest.WaitGone(t, "the child of a killed parent", 10*time.Second, []int{child})
}

const helperEnv = "GORUN_PROC_TEST_HELPER"

// TestHelperStartsASleeper is the helper of TestParentDeathKillsTheChild.
func TestHelperStartsASleeper(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("run by TestParentDeathKillsTheChild")
	}
	p, started := Start(sh("exec sleep 60"), Options{Setsid: true})
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	fmt.Printf("child %d\n", p.Pid)
	<-p.Done() // until the parent test kills this process
}

// TestEndedKnowsAKilledProcess: a live process has not ended; one killed
// has, whether reaped yet or still a zombie, and its state is known once
// Ended says so.
func TestEndedKnowsAKilledProcess(t *testing.T) {
	p, started := Start(sh("exec sleep 60"), Options{})
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if p.Ended() {
		t.Fatal("Ended() true for a live process")
	}
	if err := syscall.Kill(p.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !p.Ended(); {
		if time.Now().After(deadline) {
			t.Fatal("not Ended() a minute after SIGKILL")
		}
		runtime.Gosched()
	}
	if state, _ := p.State(); state == nil {
		t.Fatal("Ended() true, but no state")
	}
}
