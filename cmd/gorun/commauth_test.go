package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/comm"
)

// gatedDDP is a worker command line: each worker prints its pid and
// the store's address, rank 1 then waits until the test writes a line
// into the FIFO $COMMAUTH_GATE, and both run bin/ddp with args. Rank 0
// meanwhile serves the store and waits in its mesh listener for rank 1:
// both are open to strangers.
func gatedDDP(args ...string) []string {
	script := `echo "worker $RANK pid $$ store $MASTER_ADDR:$MASTER_PORT"; ` +
		`if [ "$RANK" = 1 ]; then read line < "$COMMAUTH_GATE"; fi; exec "$0" "$@"`
	return append([]string{"--no-python", "/bin/sh", "-c", script, ddpBin}, args...)
}

// listeningPorts are the TCP ports pid listens on.
func listeningPorts(pid int) map[int]bool {
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	ports := map[int]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports[int(p)] = true
			}
		}
	}
	return ports
}

// rss is pid's resident memory in kB.
func rss(t *testing.T, pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// storeStranger connects to the store at addr, skips its greeting,
// sends what send writes and returns the store's answer line.
func storeStranger(t *testing.T, addr string, send func(c net.Conn)) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	if hello, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(hello, "GORUN-STORE 1 ") {
		t.Fatalf("store greeting %q, %v", hello, err)
	}
	done := make(chan struct{})
	go func() { defer close(done); send(c) }()
	line, _ := r.ReadString('\n')
	c.Close() // ends send
	<-done
	return line
}

// TestCommauthStrangersRefused: while a 2-rank bin/ddp job waits for
// rank 1, strangers connect to rank 0's store (garbage, a wrong secret,
// 100 MiB without a newline) and to its mesh listener (garbage, a
// well-formed claim of rank 1 without the secret). Each is refused, the
// mesh strangers are sent nothing but the challenge (no ring name),
// rank 0's memory does not grow, and the job completes.
func TestCommauthStrangersRefused(t *testing.T) {
	t.Parallel()
	gate := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, stdout, stderr := startGorun(t, testEnv("COMMAUTH_GATE="+gate), append([]string{"--nproc-per-node=2"}, gatedDDP("--steps", "5")...)...)
	var pid int
	var storeAddr string
	waitFor(t, "rank 0's pid and store", func() bool {
		for _, l := range linesWithPrefix(stdout.String(), "[default0]:worker 0 pid ") {
			_, err := fmt.Sscanf(l, "%d store %s", &pid, &storeAddr)
			return err == nil
		}
		return false
	})
	_, storePort, _ := net.SplitHostPort(storeAddr)
	var meshAddr string
	waitFor(t, "rank 0's store and mesh listeners", func() bool {
		for p := range listeningPorts(pid) {
			if strconv.Itoa(p) != storePort {
				meshAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
			}
		}
		return meshAddr != "" && listeningPorts(pid)[mustAtoi(t, storePort)]
	})
	before := rss(t, pid)
	// The store.
	if got := storeStranger(t, storeAddr, func(c net.Conn) { _, _ = c.Write([]byte("GET pg//addr/0\n")) }); !strings.Contains(got, "authentication failed: want AUTH") {
		t.Errorf("garbage at the store: %q", got)
	}
	wrong, _ := comm.NewSecretHex()
	wrongSecret, _ := comm.ParseSecret(wrong)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := comm.DialStore(ctx, storeAddr, wrongSecret); !errors.Is(err, comm.ErrStoreAuth) || !strings.Contains(err.Error(), "wrong or missing GORUN_JOB_SECRET") {
		t.Errorf("a wrong secret at the store: %v", err)
	}
	endless := func(c net.Conn) {
		piece := make([]byte, 1<<20)
		for i := range piece {
			piece[i] = 'x'
		}
		for range 100 {
			if _, err := c.Write(piece); err != nil {
				return
			}
		}
	}
	if got := storeStranger(t, storeAddr, endless); !strings.Contains(got, "more than 256 bytes") {
		t.Errorf("100 MiB without a newline at the store: %q", got)
	}
	if after := rss(t, pid); after-before > 32<<10 {
		t.Errorf("rank 0 grew from %d kB to %d kB", before, after)
	}
	// The mesh.
	for _, tc := range []struct {
		name   string
		answer func() []byte
	}{
		{"garbage", func() []byte { return []byte(strings.Repeat("garbage!", 9)[:68]) }},
		{"rank 1 without the secret", func() []byte {
			b := binary.LittleEndian.AppendUint32(nil, 1)
			tail := make([]byte, 64) // a nonce and a MAC, both random
			_, _ = rand.Read(tail)
			return append(b, tail...)
		}},
	} {
		c, err := net.Dial("tcp", meshAddr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		challenge := make([]byte, 36)
		if _, err := io.ReadFull(c, challenge); err != nil || string(challenge[:4]) != "GRM1" {
			t.Fatalf("%s: the mesh challenge %q, %v", tc.name, challenge, err)
		}
		_, _ = c.Write(tc.answer())
		if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
			t.Errorf("%s: after the challenge the listener sent %q (%v); want nothing, then the close", tc.name, rest, err)
		}
		c.Close()
	}
	waitFor(t, "both mesh refusals logged", func() bool {
		return strings.Count(stderr.String(), "refused a mesh connection from 127.0.0.1:") == 2
	})
	// Rank 1 goes on: the job completes.
	f, err := os.OpenFile(gate, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("go\n")
	f.Close()
	if code := waitExit(t, cmd); code != 0 || len(linesWithPrefix(stdout.String(), "[default0]:final ")) != 1 {
		t.Errorf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
}

func mustAtoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCommauthStopIsNotADesync: SIGTERM to gorun in the middle of a
// bin/ddp run stops the workers; whatever they report, it is not a
// desync (the stop used to reach the flight recorder as "expected
// message N of 72 bytes").
func TestCommauthStopIsNotADesync(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"shm", "tcp"} {
		for round := range 3 {
			cmd, stdout, stderr := startGorun(t, testEnv("GORUN_CPU_TRANSPORT="+transport), "--nproc-per-node=2", "--no-python", ddpBin, "--steps", "1000000")
			waitFor(t, "ddp to train", func() bool { return strings.Contains(stdout.String(), "[default0]:step 20 ") })
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			waitExit(t, cmd)
			if out := stdout.String() + stderr.String(); strings.Contains(out, "desync") {
				t.Errorf("%s, round %d: a stop reported as a desync:\n%s", transport, round, stderr.String())
			}
		}
	}
}
