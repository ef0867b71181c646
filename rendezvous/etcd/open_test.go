package etcd

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/sirupsen/logrus"
)

// quietLog drops what it is told.
func quietLog() logrus.FieldLogger {
	log := logrus.New()
	log.SetOutput(io.Discard)
	return log
}

// openSpec is a one-node c10d job whose embedded store this node hosts
// on a free port of 127.0.0.1.
func openSpec(t *testing.T, runID string) rendezvous.Spec {
	t.Helper()
	port, err := rendezvous.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return rendezvous.Spec{Backend: "c10d", Endpoint: "127.0.0.1:" + strconv.Itoa(port), RunID: runID,
		MinNodes: 1, MaxNodes: 1, NodeRank: -1, NprocPerNode: 1, LocalAddr: "127.0.0.1", Log: quietLog()}
}

// TestOpenHostsTheStoreAndReleasesIt: a one-node c10d job hosts its
// store at the endpoint, makes its own token, forms a round, and after
// Close and Release the port is free and the store's data folder gone.
func TestOpenHostsTheStoreAndReleasesIt(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv(rendezvous.TokenEnv, "")
	spec := openSpec(t, "open-hosts")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !s.hosting.Load() {
		t.Error("the node named by the endpoint does not host the store")
	}
	if dirs, _ := filepath.Glob(filepath.Join(tmp, "gorun-store-*")); len(dirs) != 1 {
		t.Errorf("store data folders %v; want one in %s", dirs, tmp)
	}
	round, err := s.Next(ctx, rendezvous.Node{Addr: "127.0.0.1", LocalWorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if round.WorldSize != 1 || round.RunID != spec.RunID {
		t.Errorf("round %+v; want world size 1 of %s", round, spec.RunID)
	}
	if err := s.Succeed(ctx, round); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s.Release()
	ln, err := net.Listen("tcp", spec.Endpoint)
	if err != nil {
		t.Errorf("the store's port after Release: %v", err)
	} else {
		ln.Close()
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("left in the temporary folder after Release: %v", entries)
	}
}

// TestOpenRefusesBadInput: what the flags got wrong is bad input
// (rendezvous.ErrInvalidConfig, exit 2 on the command line), in words
// that name the setting, and nothing is left listening.
func TestOpenRefusesBadInput(t *testing.T) {
	shortToken := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(shortToken, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		edit func(*rendezvous.Spec)
		want string
	}{
		{"is_host", func(s *rendezvous.Spec) { s.Conf = map[string]string{"is_host": "maybe"} }, "is_host"},
		{"timeout", func(s *rendezvous.Spec) { s.Conf = map[string]string{"join_timeout": "soon"} }, "join_timeout"},
		{"endpoint", func(s *rendezvous.Spec) { s.Endpoint = "127.0.0.1:port" }, "Endpoint"},
		{"two store hosts", func(s *rendezvous.Spec) { s.Conf = map[string]string{"store_hosts": "a+b"} }, "2 hosts; want 3, 5 or 7"},
		{"short token file", func(s *rendezvous.Spec) { s.Conf = map[string]string{"token_file": shortToken} }, "bad job token"},
		{"short token", func(s *rendezvous.Spec) { t.Setenv(rendezvous.TokenEnv, "short") }, rendezvous.TokenEnv},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(rendezvous.TokenEnv, "")
			spec := openSpec(t, "open-bad-"+strings.ReplaceAll(tt.name, " ", "-"))
			tt.edit(&spec)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := Open(ctx, spec)
			if err == nil {
				s.Release()
				t.Fatal("opened")
			}
			if !errors.Is(err, rendezvous.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open: %v; want bad input (ErrInvalidConfig) naming %q", err, tt.want)
			}
		})
	}
}

// TestOpenTwoAgentsOnOneHost: two agents of a 2-node job on one host
// with the same endpoint: the one that binds the port hosts the store,
// the other finds it taken and joins as a client (hostOrJoin), and both
// meet in one round.
func TestOpenTwoAgentsOnOneHost(t *testing.T) {
	t.Setenv(rendezvous.TokenEnv, "0123456789abcdef0123456789abcdef")
	spec := openSpec(t, "open-two")
	spec.MinNodes, spec.MaxNodes = 2, 2
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release()
	second, err := Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release()
	if !first.hosting.Load() || second.hosting.Load() {
		t.Fatalf("hosting: first %v, second %v; want the first alone", first.hosting.Load(), second.hosting.Load())
	}
	rounds := make(chan rendezvous.Round, 2)
	errs := make(chan error, 2)
	for _, s := range []*Session{first, second} {
		go func() {
			r, err := s.Next(ctx, rendezvous.Node{Addr: "127.0.0.1", LocalWorldSize: 1})
			rounds <- r
			errs <- err
		}()
	}
	ranks := map[int]bool{}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		r := <-rounds
		if r.WorldSize != 2 {
			t.Errorf("round %+v; want world size 2", r)
		}
		ranks[r.GroupRank] = true
	}
	if !ranks[0] || !ranks[1] {
		t.Errorf("group ranks %v; want 0 and 1", ranks)
	}
	// The job ends when every node has succeeded: the host waits for the
	// other to leave.
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOpenNamesAStoreThatNeverCame: a node that does not host the
// embedded store retries within connect_timeout, then says what the probe
// found and that the hosting node may not have started.
func TestOpenNamesAStoreThatNeverCame(t *testing.T) {
	t.Setenv(rendezvous.TokenEnv, "0123456789abcdef0123456789abcdef")
	spec := openSpec(t, "open-never")
	spec.MinNodes, spec.MaxNodes = 2, 2
	spec.Conf = map[string]string{"is_host": "false", "connect_timeout": "1"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Open(ctx, spec)
	if err == nil {
		s.Release()
		t.Fatal("opened a store that no one runs")
	}
	for _, want := range []string{"never reached etcd at " + spec.Endpoint, "connection refused", "may not have started yet"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open: %v; want it to say %q", err, want)
		}
	}
	if !errors.Is(err, ErrUnreachable) || errors.Is(err, rendezvous.ErrInvalidConfig) {
		t.Errorf("Open: %v; want ErrUnreachable, not bad input", err)
	}
}
