package jobstore

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
)

// failingListener fails its first fails Accepts with EMFILE, as a
// process out of descriptors does, then accepts.
type failingListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestClientPortAcceptsAfterEMFILE: an accept that fails for want of
// descriptors does not end the client port: it backs off and forwards
// the next connection (it used to stop accepting for good).
func TestClientPortAcceptsAfterEMFILE(t *testing.T) {
	t.Parallel()
	socket := echoStore(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: ln}
	fl.fails.Store(3)
	p := newClientPort(fl, socket)
	p.open()
	defer p.close()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v; want the store's echo after the port's EMFILEs", buf, err)
	}
}

// echoStore is a "store" on a Unix socket that echoes what it reads; it
// returns the socket's path.
func echoStore(t *testing.T) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "s")
	store, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	go func() {
		for {
			c, err := store.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return socket
}

// TestClientPortCapsIdleConnections: connections that never prove
// themselves (a flood of idle ones) are capped per source, the oldest
// closed first, and closed at the handshake deadline; a client of the
// job, arriving during the flood, is served. A flood of 7,000 used to
// hold 21,000 descriptors of the store's process and kill etcd.
func TestClientPortCapsIdleConnections(t *testing.T) {
	t.Parallel()
	token, err := rendezvous.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	srvTLS, err := jobauth.ServerTLS(token)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := newClientPort(ln, echoStore(t))
	p.tls, p.limits = srvTLS, pendingLimits{total: 32, perSource: 8, deadline: 2 * time.Second}
	p.open()
	defer p.close()
	const flood = 40
	idle := make([]net.Conn, flood)
	for i := range idle {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle[i] = c
	}
	// The port closes all but the newest 8; each closed one reads EOF.
	closed := 0
	for _, c := range idle {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
		if closed == flood-8 {
			break
		}
	}
	if closed != flood-8 {
		t.Fatalf("%d of %d idle connections closed; want %d (8 per source kept)", closed, flood, flood-8)
	}
	p.mu.Lock()
	held, pending := len(p.conns), p.npending
	p.mu.Unlock()
	if held > 8 || pending > 8 {
		t.Errorf("the port holds %d connections, %d pending; want at most 8", held, pending)
	}
	// The job's client, during the flood.
	cliTLS, err := jobauth.ClientTLS(token)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cliTLS)
	if err != nil {
		t.Fatalf("the job's client during a flood: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v; want the store's echo", buf, err)
	}
	// The 8 left are closed at the deadline.
	for _, c := range idle[flood-8:] {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("an idle connection past the handshake deadline: read %v; want EOF", err)
		}
	}
}

// TestClientPortRefusesStrangers: a client without the job's
// certificate (another token's, or none) is closed at the handshake and
// never reaches the store.
func TestClientPortRefusesStrangers(t *testing.T) {
	t.Parallel()
	token, _ := rendezvous.NewToken()
	other, _ := rendezvous.NewToken()
	srvTLS, err := jobauth.ServerTLS(token)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := newClientPort(ln, echoStore(t))
	p.tls = srvTLS
	p.open()
	defer p.close()
	otherTLS, _ := jobauth.ClientTLS(other)
	noCert, _ := jobauth.ClientTLS(token)
	noCert.Certificates = nil
	for name, cfg := range map[string]*tls.Config{"another job's token": otherTLS, "no certificate": noCert} {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
		if err != nil {
			continue // refused in the handshake
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte("ping"))
		if n, err := c.Read(make([]byte, 4)); err == nil {
			t.Errorf("%s: read %d bytes from the store; want the connection refused", name, n)
		}
		c.Close()
	}
}
