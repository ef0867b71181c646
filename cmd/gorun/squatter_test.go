package main

import (
	"bufio"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/rendezvous"
)

// squatterScript binds a port of 127.0.0.1 (argv[1], 0 for any), prints
// it, and then, for each connection, sends an HTTP/2 SETTINGS frame (what
// an etcd would) and prints in hex what it reads: what a squatter on a
// job's endpoint collects.
const squatterScript = `
import socket, sys, threading
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
print(s.getsockname()[1], flush=True)
lock = threading.Lock()
def serve(c):
    try:
        c.sendall(bytes.fromhex("000000040000000000"))
        while True:
            b = c.recv(65536)
            if not b:
                return
            with lock:
                print(b.hex(), flush=True)
    except OSError:
        pass
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`

// squatter runs squatterScript, as cred's user when set; it returns the
// port and what it collected so far.
func squatter(t *testing.T, cred *syscall.Credential) (port string, collected func() []byte) {
	t.Helper()
	cmd := exec.Command(testPython(t), "-c", squatterScript, "0")
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	lines.Buffer(make([]byte, 1<<20), 1<<22)
	if !lines.Scan() {
		t.Fatalf("the squatter did not start: %v", lines.Err())
	}
	port = strings.TrimSpace(lines.Text())
	var mu sync.Mutex
	var got []byte
	go func() {
		for lines.Scan() {
			b, _ := hex.DecodeString(lines.Text())
			mu.Lock()
			got = append(got, b...)
			mu.Unlock()
		}
	}()
	return port, func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return append([]byte(nil), got...)
	}
}

// TestSquatterCollectsNoPassword: a process of the same user that holds
// the job's endpoint port first (under Slurm the port is predictable)
// and answers as an etcd would: the agent joins it as a client, as it
// joins another agent's store, but the job's TLS shows that it cannot
// prove the token, and the agent fails at once with that said, having
// sent nothing that can be replayed. It used to send the store's user and
// password, which a replay then used to list the job's keys and revoke
// its leases.
func TestSquatterCollectsNoPassword(t *testing.T) {
	t.Parallel()
	port, collected := squatter(t, nil)
	r := runGorun(t, testEnv(), "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:"+port,
		"--rdzv-id=squatted", "--rdzv-conf=connect_timeout=20", "--nproc-per-node=1", "--no-python", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "not this job's store") {
		t.Errorf("gorun exit %d; want a failure naming a store that is not the job's\n%s", r.code, r.stderr)
	}
	password := rendezvous.Token(testToken).EtcdPassword()
	if got := collected(); strings.Contains(string(got), password) || strings.Contains(string(got), rendezvous.EtcdUser+"\x12") {
		t.Errorf("the squatter collected the store's login (%d bytes)", len(got))
	}
}

// TestPortOfAnotherUserIsNoAgent: a port of the job's endpoint held by
// another local user is not another agent of this job (a job's agents
// run as one user): the agent refuses it at once, naming that user,
// and sends it nothing.
func TestPortOfAnotherUserIsNoAgent(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	// The endpoint as the port's own address, or as all of the host's.
	for _, host := range []string{"127.0.0.1", "0.0.0.0"} {
		t.Run(host, func(t *testing.T) {
			t.Parallel()
			port, collected := squatter(t, cred)
			r := runGorun(t, testEnv(), "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint="+host+":"+port,
				"--rdzv-id=squatted-other", "--nproc-per-node=1", "--no-python", "true")
			if r.code == 0 || !strings.Contains(r.stderr, "held by user "+proctest.OtherUserName) {
				t.Errorf("gorun exit %d; want a refusal naming user %s\n%s", r.code, proctest.OtherUserName, r.stderr)
			}
			if got := collected(); len(got) > 0 {
				t.Errorf("the other user's process read %d bytes; want none", len(got))
			}
		})
	}
}
