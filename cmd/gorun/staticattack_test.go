package main

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// Attacks by another local user on the static backend's master port,
// where node 0 meets the other nodes and the workers' store is served.

// staticNode is the command line of one node of a static job of nnodes
// on 127.0.0.1:port.
func staticNode(nnodes, rank, port int, extra ...string) []string {
	return append([]string{fmt.Sprintf("--nnodes=%d", nnodes), fmt.Sprintf("--node-rank=%d", rank), "--nproc-per-node=1",
		"--master-addr=127.0.0.1", fmt.Sprintf("--master-port=%d", port), "--rdzv-id=static-attack", "--rdzv-conf=timeout=60"}, extra...)
}

// otherPython starts python3 -c script as the other user and returns its
// output's lines; it is killed when the test ends.
func otherPython(t *testing.T, cred *syscall.Credential, script string, args ...string) *bufio.Scanner {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", append([]string{"-c", script}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = "/"
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return bufio.NewScanner(out)
}

// waitListening waits until something accepts connections at port.
func waitListening(t *testing.T, port int) {
	t.Helper()
	waitFor(t, "node 0 listening on the master port", func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// floodScript opens argv[2] connections to port argv[1] as fast as it
// can, each sending argv[4] (nothing when absent), says so, holds them
// argv[3] seconds, closes them and says so.
const floodScript = `
import socket, sys, time
conns = []
for _ in range(int(sys.argv[2])):
    try:
        c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
        if len(sys.argv) > 4:
            c.sendall(sys.argv[4].encode())
        conns.append(c)
    except OSError:
        pass
print("flooded", len(conns), flush=True)
time.sleep(float(sys.argv[3]))
for c in conns:
    c.close()
print("done", flush=True)
`

// TestStaticMeetingSurvivesAFlood: another user's flood of idle
// connections drives node 0 (run with 128 descriptors) past "too many
// open files"; node 0 keeps accepting, closes callers silent for the
// hello timeout, and node 1 forms the job with it: after a flood that
// ended (gorun's own workers: the meeting's own listener), and during
// one held for a minute (Python workers: the agent's store diverts the
// meeting's callers).
func TestStaticMeetingSurvivesAFlood(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	py := writePython(t, t.TempDir(), "print('worker ran')\n")
	for _, tc := range []struct {
		name   string
		worker []string
		hold   string // seconds the flood holds its connections
		until  string // the flood's line after which node 1 starts
		sends  []string
	}{
		{"no-python, after the flood", []string{"--no-python", "true"}, "1", "done", nil},
		{"python, during the flood", []string{py}, "60", "flooded", nil},
		// A first byte that is no meeting's: the store's own, while the
		// meeting lasts, would wait without a bound.
		{"python, a byte each", []string{py}, "60", "flooded", []string{"A"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			port := proctest.FreePort(t, "127.0.0.1")
			env := testEnv("PYTHON_EXEC=" + testPython(t))
			args := staticNode(2, 0, port, tc.worker...)
			c0, _, e0 := startCmd(t, exec.Command("/bin/sh", append([]string{"-c", `ulimit -n 128 && exec "$0" "$@"`, gorunBin}, args...)...), env)
			waitListening(t, port)
			flood := otherPython(t, cred, floodScript, append([]string{strconv.Itoa(port), "300", tc.hold}, tc.sends...)...)
			for flood.Scan() && !strings.HasPrefix(flood.Text(), tc.until) {
				t.Log("flood: ", flood.Text())
			}
			r := runGorun(t, env, staticNode(2, 1, port, tc.worker...)...)
			if r.code != 0 {
				t.Errorf("node 1: exit %d\n%s", r.code, r.stderr)
			}
			if code := waitExit(t, c0); code != 0 {
				t.Errorf("node 0: exit %d\n%s", code, e0)
			}
		})
	}
}

// helloScript sends node 0 at port argv[1] the hello line argv[2] and
// prints its answer.
const helloScript = `
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
c.sendall(sys.argv[2].encode() + b"\n")
print("answer", c.makefile().readline().strip(), flush=True)
`

// staticHello is a hello line of the static meeting.
func staticHello(runID string, nodeRank int, nproc string) string {
	return fmt.Sprintf(`{"gorun_static":1,"run_id":%q,"nnodes":2,"node_rank":%d,"nproc":%s,"role":"default","max_restarts":0}`, runID, nodeRank, nproc)
}

// TestStaticStrangersHello: another user's hello that claims node rank 1
// with 2^63-1 workers is refused, bounded, and the real node 1 then
// forms the job (before, the sum overflowed into a negative WORLD_SIZE
// and the real node was never told); one that disagrees on the job is
// named by its address, as a caller, not as a node of the job.
func TestStaticStrangersHello(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	script := writeScript(t, `echo "world $WORLD_SIZE"`)

	port := proctest.FreePort(t, "127.0.0.1")
	c0, o0, e0 := startGorun(t, testEnv(), staticNode(2, 0, port, "--no-python", script)...)
	waitListening(t, port)
	stranger := otherPython(t, cred, helloScript, strconv.Itoa(port), staticHello("static-attack", 1, "9223372036854775807"))
	if !stranger.Scan() || !strings.Contains(stranger.Text(), "has 9223372036854775807 workers; want 1..65536") {
		t.Errorf("the stranger's answer: %q; want its worker count refused", stranger.Text())
	}
	r := runGorun(t, testEnv(), staticNode(2, 1, port, "--no-python", script)...)
	if r.code != 0 || !strings.Contains(r.stdout, "world 2") {
		t.Errorf("the real node 1: exit %d; want 0 and a world of 2\n%s%s", r.code, r.stdout, r.stderr)
	}
	if code := waitExit(t, c0); code != 0 || !strings.Contains(o0.String(), "world 2") {
		t.Errorf("node 0: exit %d; want 0 and a world of 2\n%s%s", code, o0, e0)
	}

	port = proctest.FreePort(t, "127.0.0.1")
	c0, _, e0 = startGorun(t, testEnv(), staticNode(2, 0, port, "--no-python", script)...)
	waitListening(t, port)
	otherPython(t, cred, helloScript, strconv.Itoa(port), staticHello("not-this-job", 1, "1")).Scan()
	if code := waitExit(t, c0); code != 2 || !strings.Contains(e0.String(), "the caller at 127.0.0.1:") || !strings.Contains(e0.String(), `(claiming --node-rank=1) has run id "not-this-job"`) {
		t.Errorf("node 0 after a stranger's hello of another job: exit %d; want 2, naming the caller by its address\n%s", code, e0)
	}
}

// bindScript tries to bind port argv[1] every 10 ms until killed, and
// prints "bound" and the Unix time in ns if it ever can.
const bindScript = `
import socket, sys, time
print("trying", flush=True)
while True:
    s = socket.socket()
    try:
        s.bind(("", int(sys.argv[1])))
        s.listen(1)
        print("bound", time.time_ns(), flush=True)
        time.sleep(60)
    except OSError:
        s.close()
        time.sleep(0.01)
`

// TestStaticMasterPortStaysHeld: node 0's agent holds the master port
// from the meeting to the job's end (the meeting's connections are
// diverted from the agent's store of Python workers): another user who
// tries to bind it all along never can, and the Python workers form
// their group over the agent's store.
func TestStaticMasterPortStaysHeld(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	py := writePython(t, t.TempDir(), `import os, time, torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
world = dist.get_world_size()
dist.destroy_process_group()
print("group of", world, "store", os.environ.get("TORCHELASTIC_USE_AGENT_STORE"), "done at", time.time_ns(), flush=True)
`)
	port := proctest.FreePort(t, "127.0.0.1")
	env := testEnv("PYTHON_EXEC=" + testPython(t))
	c0, o0, e0 := startGorun(t, env, staticNode(2, 0, port, py)...)
	waitListening(t, port)
	binder := otherPython(t, cred, bindScript, strconv.Itoa(port))
	bound := make(chan int64, 1)
	go func() {
		for binder.Scan() {
			if at, ok := strings.CutPrefix(binder.Text(), "bound "); ok {
				ns, _ := strconv.ParseInt(at, 10, 64)
				bound <- ns
				return
			}
		}
	}()
	r := runGorun(t, env, staticNode(2, 1, port, py)...)
	code0 := waitExit(t, c0)
	// The workers' work ended when the last of them printed; the port
	// is free once the agents exit.
	var ended int64
	for _, out := range []string{o0.String(), r.stdout} {
		if _, at, ok := strings.Cut(out, "done at "); ok {
			ns, _ := strconv.ParseInt(strings.TrimSpace(strings.SplitN(at, "\n", 2)[0]), 10, 64)
			ended = max(ended, ns)
		}
	}
	select {
	case ns := <-bound:
		if ns < ended {
			t.Errorf("another user bound the master port while the job ran, %v before its workers were done", time.Duration(ended-ns))
		}
	default:
	}
	if r.code != 0 || code0 != 0 || !strings.Contains(o0.String(), "group of 2 store True") {
		t.Errorf("node 0 exit %d, node 1 exit %d; want 0 and a group of 2 over the agent's store\n%s%s\n%s", code0, r.code, o0, e0, r.stderr)
	}
}

// forgerScript listens on port argv[1] as if it were node 0, answers
// every caller's first line with the table argv[2], and says "ready".
const forgerScript = `
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.makefile().readline()
    c.sendall(sys.argv[2].encode() + b"\n")
    c.close()
`

// TestStaticForgedTable: another user who answers on the master port
// in node 0's place with a table of 2^63-1 workers does not give node
// 1's workers an overflowing rank (before: RANK=9223372036854775807,
// WORLD_SIZE negative, exit 0): the table is refused, by what is wrong.
func TestStaticForgedTable(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	port := proctest.FreePort(t, "127.0.0.1")
	forger := otherPython(t, cred, forgerScript, strconv.Itoa(port), `{"gorun_static":1,"nprocs":[9223372036854775807,1],"roles":["x","default"]}`)
	if !forger.Scan() || forger.Text() != "ready" {
		t.Fatalf("the forger did not start: %q", forger.Text())
	}
	r := runGorun(t, testEnv(), staticNode(2, 1, port, "--no-python", "/bin/sh", "-c", `echo "rank $RANK world $WORLD_SIZE"`)...)
	if r.code == 0 || strings.Contains(r.stdout, "rank ") || !strings.Contains(r.stderr, "answered 9223372036854775807 workers for node 0") {
		t.Errorf("node 1: exit %d; want a refusal of the table and no worker started\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestMasterPortOfAnotherUser: a master port that another user holds is
// refused naming that user, whether node 0 meets the others there
// itself (gorun's own workers) or through the agent's store (Python).
func TestMasterPortOfAnotherUser(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	py := writePython(t, t.TempDir(), "print('worker ran')\n")
	for _, worker := range [][]string{{"--no-python", "true"}, {py}} {
		t.Run(worker[0], func(t *testing.T) {
			t.Parallel()
			port, _ := squatter(t, cred)
			p, _ := strconv.Atoi(port)
			r := runGorun(t, testEnv("PYTHON_EXEC="+testPython(t)), staticNode(2, 0, p, worker...)...)
			if r.code == 0 || !strings.Contains(r.stderr, "held by user "+proctest.OtherUserName) {
				t.Errorf("exit %d; want a refusal naming user %s\n%s", r.code, proctest.OtherUserName, r.stderr)
			}
		})
	}
}
