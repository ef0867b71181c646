package agentstore

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/torchpy"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// pythons are PyTorch 2.x (the reference) and Debian's 1.13, where they
// are installed.
func pythons(t *testing.T) []torchpy.Choice {
	t.Helper()
	var out []torchpy.Choice
	for _, c := range []torchpy.Choice{torchpy.Find("../.."), torchpy.Oldest()} {
		if c.Missing == "" {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		if os.Getenv("GORUN_REQUIRE_TORCH") == "1" {
			t.Fatal("no PyTorch, and GORUN_REQUIRE_TORCH=1")
		}
		t.Skip("SKIPPED: no PyTorch on this machine")
	}
	return out
}

func serve(t *testing.T) *Server {
	t.Helper()
	s, _ := serveLogged(t)
	return s
}

// serveLogged serves a store whose log the test reads.
func serveLogged(t *testing.T) (*Server, *logtest.Hook) {
	t.Helper()
	log, hook := logtest.NewNullLogger()
	s, err := Listen(0, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.Serve(ctx)
	t.Cleanup(func() {
		cancel()
		s.Wait()
	})
	return s, hook
}

func run(t *testing.T, py string, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(py, append([]string{"testdata/client.py"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	// PyTorch 2.15 sometimes aborts at exit, after the client's work
	// (its teardown: "terminate called without an active exception",
	// seen under torchrun too): what the store served was right.
	if torn, ok := strings.CutSuffix(text, "terminate called without an active exception"); ok && err != nil && strings.HasSuffix(strings.TrimSpace(torn), "ok") {
		t.Logf("%s %v: aborted at exit after its work (PyTorch's teardown): %v", py, args, err)
		return
	}
	if err != nil || !strings.HasSuffix(text, "ok") {
		t.Errorf("%s %v: %v\n%s", py, args, err, out)
	}
}

// TestPyTorchClients: PyTorch's own TCPStore client, 2.x and 1.13, gets
// every operation it has right from the agent's store, and a 2-rank gloo
// job (DDP, barrier, all-reduce) initialises and trains over it as the
// agent's store (TORCHELASTIC_USE_AGENT_STORE=True); Reset lets the next
// attempt's ranks start afresh on the same port.
func TestPyTorchClients(t *testing.T) {
	for _, py := range pythons(t) {
		t.Run("torch "+py.Torch, func(t *testing.T) {
			t.Parallel()
			s := serve(t)
			port := strconv.Itoa(s.Port())
			run(t, py.Python, nil, "ops", port)
			for attempt := range 2 {
				s.Reset()
				var wg sync.WaitGroup
				for rank := range 2 {
					wg.Go(func() {
						run(t, py.Python, []string{"RANK=" + strconv.Itoa(rank), "WORLD_SIZE=2", "TORCHELASTIC_RESTART_COUNT=" + strconv.Itoa(attempt)}, "train", port)
					})
				}
				wg.Wait()
			}
		})
	}
}

// TestCloseEndsEverything: Close ends parked waits' connections and the
// accept loop; Wait returns.
func TestCloseEndsEverything(t *testing.T) {
	s, err := Listen(0, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(context.Background())
	done := make(chan struct{})
	go func() {
		s.Wait()
		close(done)
	}()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after Close")
	}
}

// dial opens a 2.x connection (validation sent).
func dial(t *testing.T, s *Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(s.Port()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(binary.LittleEndian.AppendUint32([]byte{0}, validateMagic)); err != nil {
		t.Fatal(err)
	}
	return c
}

func query(code byte, fields ...[]byte) []byte {
	b := []byte{code}
	for _, f := range fields {
		b = append(b, f...)
	}
	return b
}

// TestBarrierAndBadQueries: BARRIER releases every caller once world
// came; a query that is not the protocol (an unknown operation, a field
// past the limits) ends that connection alone.
func TestBarrierAndBadQueries(t *testing.T) {
	s, hook := serveLogged(t)
	a, b := dial(t, s), dial(t, s)
	barrier := query(18, field([]byte("bar")), u64Bytes(2))
	if _, err := a.Write(barrier); err != nil {
		t.Fatal(err)
	}
	_ = a.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := a.Read(make([]byte, 1)); err == nil {
		t.Fatal("released before the second caller came")
	}
	if _, err := b.Write(barrier); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]net.Conn{"first": a, "second": b} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, 1)
		if _, err := io.ReadFull(c, got); err != nil || got[0] != stopWaiting {
			t.Errorf("%s caller: %v, %v; want released", name, got, err)
		}
	}
	for name, tc := range map[string]struct {
		q   []byte
		log string
	}{
		"unknown operation": {[]byte{99}, "not a TCPStore query: operation 99"},
		"a 1 TiB key":       {query(3, u64Bytes(1<<40)), "not a TCPStore query: a field of 1099511627776 bytes, more than the 65536 allowed"},
	} {
		c := dial(t, s)
		if _, err := c.Write(tc.q); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("%s: read %v; want the connection closed", name, err)
		}
		logged := false
		for _, e := range hook.AllEntries() {
			logged = logged || strings.Contains(e.Message, "workers' store: closed the connection from 127.0.0.1:") && strings.Contains(e.Message, tc.log)
		}
		if !logged {
			t.Errorf("%s: no log line naming %q", name, tc.log)
		}
	}
	// The store still serves the others.
	if _, err := a.Write(query(4, field([]byte("n")), u64Bytes(7))); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(a, got); err != nil || binary.LittleEndian.Uint64(got) != 7 {
		t.Errorf("ADD after the bad queries: %v, %v", got, err)
	}
}
