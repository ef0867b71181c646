package jobauth

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
)

// TestClientTLSProvesTheServer: the job's client TLS refuses a server
// that does not hold the job's token (a squatter on the port, TLS or
// not) before it sends anything of the job's: the squatter sees a TLS
// ClientHello and nothing else, and the error is ErrNotJobStore.
func TestClientTLSProvesTheServer(t *testing.T) {
	t.Parallel()
	token, _ := rendezvous.NewToken()
	other, _ := rendezvous.NewToken()
	otherTLS, err := ServerTLS(other)
	if err != nil {
		t.Fatal(err)
	}
	for name, squatter := range map[string]*tls.Config{"plain": nil, "TLS of another job": otherTLS} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan []byte, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					got <- nil
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if squatter != nil {
					tc := tls.Server(c, squatter)
					_ = tc.Handshake()
					b, _ := io.ReadAll(tc)
					got <- b
					return
				}
				c.Write([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0}) // an HTTP/2 SETTINGS frame
				b, _ := io.ReadAll(c)
				got <- b
			}()
			cfg, _ := ClientTLS(token)
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
			if err == nil {
				c.Write([]byte(token.EtcdPassword()))
				c.Close()
				t.Fatal("the handshake with a squatter succeeded")
			}
			if squatter != nil && !errors.Is(err, ErrNotJobStore) {
				t.Errorf("handshake: %v; want ErrNotJobStore", err)
			}
			if b := <-got; strings.Contains(string(b), token.EtcdPassword()) || (squatter != nil && len(b) > 0) {
				t.Errorf("the squatter read %d bytes of the job's after the handshake", len(b))
			}
		})
	}
}
