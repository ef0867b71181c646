package jobstore

import (
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestParsePresence(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		line string
		want clientv3.LeaseID
		ok   bool
	}{
		{"lease=7587892014862811148\n", 7587892014862811148, true},
		{"lease=1\n", 1, true},
		{"lease=0\n", 0, false},
		{"lease=-5\n", 0, false},
		{"lease=x\n", 0, false},
		{"node=a lease=5\n", 0, false},
		{"\n", 0, false},
	} {
		got, err := parsePresence(tt.line)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parsePresence(%q) = %d, %v; want %d, ok %v", tt.line, got, err, tt.want, tt.ok)
		}
	}
}

// TestPeerClosed: only the node's own close (FIN, RST) counts as gone; a
// timeout (a network failing between the node and one member of several)
// or the port's own close does not.
func TestPeerClosed(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"FIN", io.EOF, true},
		{"FIN inside a TLS record", io.ErrUnexpectedEOF, true},
		{"RST", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{"keep-alive timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)}, false},
		{"deadline", os.ErrDeadlineExceeded, false},
		{"closed here", net.ErrClosed, false},
	} {
		if got := peerClosed(tt.err); got != tt.want {
			t.Errorf("%s: peerClosed(%v) = %v; want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
