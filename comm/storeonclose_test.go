package comm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/watchdog"
)

// TestStoreOnClose: a connection's ONCLOSE requests are ADDs run when it
// ends, whatever ends it; a key already set keeps its value; a
// connection may leave at most maxOnClose; a closing server runs none.
func TestStoreOnClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := ServeStore(ln, testSecret)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial := func() *StoreClient {
		c, err := DialStore(ctx, srv.Addr(), testSecret)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	watcher := dial()
	defer watcher.Close()

	dying := dial()
	for _, k := range []string{"gone/1", "kept"} {
		if err := dying.CreateOnClose(ctx, k, "gone"); err != nil {
			t.Fatal(err)
		}
	}
	if err := dying.Set(ctx, "kept", "dumped"); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		v, err := watcher.Get(ctx, "gone/1")
		if err != nil {
			v = err.Error()
		}
		got <- v
	}()
	dying.Close()
	if v := <-got; v != "gone" {
		t.Errorf("gone/1 after the connection ended: %q, want gone", v)
	}
	if v, err := watcher.Get(ctx, "kept"); err != nil || v != "dumped" {
		t.Errorf("kept after the connection ended: %q, %v; want the value set before", v, err)
	}

	greedy := dial()
	defer greedy.Close()
	for i := range maxOnClose {
		if err := greedy.CreateOnClose(ctx, fmt.Sprintf("many/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	if err := greedy.CreateOnClose(ctx, "many/last", "x"); err == nil || !strings.Contains(err.Error(), "the limit is 16") {
		t.Errorf("ONCLOSE number %d: %v; want the limit named", maxOnClose+1, err)
	}
}

// killedRankEnv makes the test binary a rank that says, through the
// store at its value, that it is gone when its connection ends, then
// waits to be killed.
const killedRankEnv = "COMM_TEST_KILLED_RANK"

// killedRank is the child of TestKilledRankIsNotWaitedFor: rank 1, which
// does what startGuard does, writes "ready" and waits for its SIGKILL.
func killedRank(addr string) int {
	secret, err := ParseSecret(os.Getenv(JobSecretEnv))
	if err == nil {
		var c *StoreClient
		if c, err = DialStore(context.Background(), addr, secret); err == nil {
			err = sayGoneOnClose(context.Background(), c, 1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed
	return 0
}

// TestKilledRankIsNotWaitedFor: rank 0 fails and waits for every rank's
// flight-recorder dump (for an hour here); rank 1, another process, is
// SIGKILLed and never dumps. Rank 0 learns at once from the store that
// rank 1 is gone and ends (before, it waited its whole DumpWait: 10 s
// by default, in 1 of 11 worker kills).
func TestKilledRankIsNotWaitedFor(t *testing.T) {
	hexSecret, err := NewSecretHex()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := ParseSecret(hexSecret)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := ServeStore(ln, secret)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	child := exec.CommandContext(ctx, os.Args[0])
	child.Env = append(os.Environ(), killedRankEnv+"="+srv.Addr(), JobSecretEnv+"="+hexSecret)
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("rank 1: %q, %v", line, err)
	}

	signals, err := DialStore(ctx, srv.Addr(), secret)
	if err != nil {
		t.Fatal(err)
	}
	defer signals.Close()
	var log strings.Builder
	exit := make(chan int, 1)
	h := &watchdog.Handler{Rank: 0, WorldSize: 2, WaitForDumps: true, DumpWait: time.Hour, Recorder: watchdog.NewRecorder(5),
		DumpDir: t.TempDir(), Mode: watchdog.TearDown, Signal: signals, Abort: func() {}, Exit: func(code int) { exit <- code }, Log: &log}
	go h.Handle(watchdog.Failure{Kind: watchdog.KindError, Rank: 0, Op: "all_reduce", Err: "rank 1 closed its connection"})
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	select {
	case <-exit:
	case <-ctx.Done():
		t.Fatalf("rank 0 still waits for the dump of rank 1, killed a minute ago:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "rank 1 is gone (its process ended without a dump): not waiting for it") {
		t.Errorf("rank 0's log does not say rank 1 is gone:\n%s", log.String())
	}
}
