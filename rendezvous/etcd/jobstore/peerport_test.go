package jobstore

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
)

// TestSinglePeerPortTakesNoStranger: a single member's peer port (etcd
// always opens one) answers no raft or members request from someone
// without the store's own peer certificate: in plain HTTP, another local
// user listed the members and, posing as a leader, committed AuthDisable.
func TestSinglePeerPortTakesNoStranger(t *testing.T) {
	t.Parallel()
	token, err := rendezvous.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartServer(context.Background(), ServerConfig{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.etcd.Peers) != 1 {
		t.Fatalf("%d peer listeners; want 1", len(s.etcd.Peers))
	}
	peer := s.etcd.Peers[0].Addr().String()
	// Closed: a single member has no peers to hear (a flood of the port
	// used to wedge etcd's listener, and then its Close).
	if c, err := net.DialTimeout("tcp", peer, 5*time.Second); err == nil {
		c.Close()
		t.Errorf("a single member's peer port %s accepts connections; want it closed", peer)
	}
	select {
	case err := <-s.Err():
		t.Errorf("the store reports %v after its peer port closed; want nothing", err)
	default:
	}
	clients := map[string]*http.Client{
		"plain HTTP": {Timeout: 5 * time.Second},
		"TLS without the store's certificate": {Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}},
	}
	for name, c := range clients {
		scheme := "http"
		if strings.HasPrefix(name, "TLS") {
			scheme = "https"
		}
		for _, path := range []string{"/members", "/raft"} {
			resp, err := c.Get(scheme + "://" + peer + path)
			if err != nil {
				continue // refused: what is wanted
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			resp.Body.Close()
			t.Errorf("%s GET %s: %s %q; want no answer", name, path, resp.Status, body)
		}
	}
}
