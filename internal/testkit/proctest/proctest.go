// Package proctest holds helpers for tests that run real processes: wait
// for a condition with a deadline, tell whether a process has ended, read
// the pids that test scripts record.
package proctest

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test after timeout. It
// polls a condition rather than sleeping a fixed time.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Gone reports whether pid has exited: it no longer exists, or it is a
// zombie that nobody has reaped yet.
func Gone(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || strings.HasPrefix(s[i+1:], " Z") || strings.HasPrefix(s[i+1:], " X")
}

// WaitGone waits until every process in pids has ended, failing the test
// after timeout.
func WaitGone(t testing.TB, what string, timeout time.Duration, pids []int) {
	t.Helper()
	WaitFor(t, what, timeout, func() bool {
		for _, pid := range pids {
			if !Gone(pid) {
				return false
			}
		}
		return true
	})
}

// PIDs reads the pids listed, separated by white space, in the files that
// match glob.
func PIDs(t testing.TB, glob string) []int {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, field := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(field)
			if err != nil {
				t.Fatalf("%s: %q is not a pid", f, field)
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

// Buffer collects a process's output; a test may read it while the output
// is still being written.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// GorunEnv is this process's environment without the variables that
// would change a gorun job's shape or defaults: a scheduler's (the
// machine running the tests may be a Slurm node or a pod), torchrun's
// PET_* and TORCHELASTIC_*, gorun's own, MASTER_*, and the worker
// settings gorun fills in; and without drop's, each a name or, ending in
// "*", a prefix.
func GorunEnv(drop ...string) []string {
	drop = append(drop, "SLURM_*", "SLURMD_NODENAME", "KUBERNETES_SERVICE_HOST", "JOB_COMPLETION_INDEX", "MASTER_*",
		"PET_*", "GORUN_*", "TORCHELASTIC_*", "OMP_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
		"MULTI_STREAM_MEMORY_REUSE", "PYTHON_EXEC", "LOGLEVEL")
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(drop, func(d string) bool {
			prefix, isPrefix := strings.CutSuffix(d, "*")
			return k == d || (isPrefix && strings.HasPrefix(k, prefix))
		}) {
			env = append(env, kv)
		}
	}
	return env
}

// FreePort is a TCP port the kernel reports free on addr (an address of
// this host, such as 127.0.0.1) now.
func FreePort(t testing.TB, addr string) int {
	t.Helper()
	port, err := PickPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// FreeAddrs is n host:port addresses free on 127.0.0.1 now, distinct
// (all are held until every one is chosen).
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// PickPort is FreePort for code that runs outside a test's goroutine (a
// test cluster's set-up): the port, or why none could be had.
func PickPort(addr string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ShortTempDir is a new folder removed at the end of the test, with a
// short path (prefix and a few random digits in the system's temporary
// folder): t.TempDir() holds the test's name, and Unix socket paths in
// it (a TMPDIR for a job) can pass the kernel's 108 bytes.
func ShortTempDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// StoreMemberPid is the pid of the store member that an agent's log last
// said serves ("member N of the job's store serves at ... (pid P; ..."),
// 0 if none.
func StoreMemberPid(log string) int {
	i := strings.LastIndex(log, "of the job's store serves at ")
	if i < 0 {
		return 0
	}
	_, rest, ok := strings.Cut(log[i:], "(pid ")
	if !ok {
		return 0
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimRight(f[0], ";"))
	return pid
}
