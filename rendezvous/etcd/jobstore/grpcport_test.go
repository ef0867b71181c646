package jobstore

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
)

// TestProvenClientsCostOneDescriptor: the store serves a client that
// proved the job's TLS itself, in its own process: the client's
// connection is the store's only descriptor for it (forwarding it to
// etcd's socket took three: a store of 16,384 nodes would have needed
// about 49,000, against a limit of 20,000 here). Every client still works, and closing
// the store closes them.
func TestProvenClientsCostOneDescriptor(t *testing.T) {
	s, token, tlsCfg := startTokenStore(t)
	const clients = 24
	before := openFiles(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cs []*clientv3.Client
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	for i := range clients {
		c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop(), TLS: tlsCfg,
			Username: rendezvous.EtcdUser, Password: token.EtcdPassword()})
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
		if _, err := c.Put(ctx, "/gorun/proven/"+string(rune('a'+i)), "x"); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	// Each client holds its end in this process too: two per client, and
	// a few of etcd's own.
	if grown := openFiles(t) - before; grown > 2*clients+8 {
		t.Errorf("%d clients grew this process's descriptors by %d; want about %d (each client's end and the store's)", clients, grown, 2*clients)
	}
	resp, err := cs[0].Get(ctx, "/gorun/proven/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != clients {
		t.Fatalf("count = %v, %v; want %d", resp, err, clients)
	}
	s.Close()
	gone, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	if _, err := cs[1].Get(gone, "/gorun/proven/a"); err == nil {
		t.Error("a client still reads from a closed store")
	}
}

// openFiles counts this process's open descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(fds)
}

// TestCloseEndsASilentProvenConnection: a client that proved the job's
// TLS and then sends nothing (no HTTP/2 preface) holds neither the
// store's Close nor its descriptor: gRPC's Stop waits for such a
// connection without closing it, for up to 120 s (found by a probe: a
// job's hosting agent exited 2 minutes late).
func TestCloseEndsASilentProvenConnection(t *testing.T) {
	s, _, tlsCfg := startTokenStore(t)
	tlsCfg.NextProtos = []string{"h2"}
	c, err := tls.Dial("tcp", s.Endpoints()[0], tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The gRPC server writes its settings first: then it holds c.
	head := make([]byte, 9)
	if _, err := io.ReadFull(c, head); err != nil {
		t.Fatalf("no HTTP/2 settings from the store: %v", err)
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		s.Close()
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the store's Close still waits for a proven connection that sent nothing, after 30 s")
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	// Closed: an end of file, or a reset; still open: the deadline.
	if _, err := io.ReadAll(c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the silent connection was not closed by the store: %v", err)
	}
}

// startTokenStore starts a store with a job token of its own, closed when
// the test ends, and returns it with the token and its clients' TLS.
func startTokenStore(t *testing.T) (*Server, rendezvous.Token, *tls.Config) {
	t.Helper()
	token, _ := rendezvous.NewToken()
	s, err := StartServer(context.Background(), ServerConfig{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tlsCfg, err := jobauth.ClientTLS(token)
	if err != nil {
		t.Fatal(err)
	}
	return s, token, tlsCfg
}
