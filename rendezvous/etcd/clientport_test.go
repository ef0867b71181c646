package etcd

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
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
	dir, err := os.MkdirTemp("", "cp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "s")
	store, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	go func() { // an echo "store"
		for {
			c, err := store.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
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
