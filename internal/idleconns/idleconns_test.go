package idleconns

import (
	"net"
	"testing"
	"time"
)

// pair is a connection accepted by a listener and its caller's end.
type pair struct{ server, caller net.Conn }

func connect(t *testing.T, ln net.Listener, says string) pair {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if says != "" {
		if _, err := c.Write([]byte(says)); err != nil {
			t.Fatal(err)
		}
		// On loopback the bytes are in s's socket once Write returned;
		// wait for them all the same, without reading them.
		deadline := time.Now().Add(10 * time.Second)
		for silent(s) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	return pair{s, c}
}

// closed says whether the store's end of p was closed by the queue.
func closed(p pair) bool {
	_ = p.server.SetReadDeadline(time.Now())
	_, err := p.server.Read(make([]byte, 0))
	ne, ok := err.(net.Error)
	return err != nil && !(ok && ne.Timeout())
}

// TestAddClosesTheSilentFirst: past the limit, the oldest connection that
// said nothing is closed, not an older one whose first bytes wait unread
// (a peer whose reader is late under load); past twice the limit, the
// oldest is closed whatever it sent.
func TestAddClosesTheSilentFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cases := []struct {
		name       string
		says       []string // what each caller sent, in order of arrival
		limit      int
		wantClosed []bool
	}{
		{"a peer before the flood", []string{"{", "", ""}, 2, []bool{false, true, false}},
		{"all silent", []string{"", "", ""}, 2, []bool{true, false, false}},
		{"all spoke, within twice the limit", []string{"{", "{", "{"}, 2, []bool{false, false, false}},
		{"all spoke, past twice the limit", []string{"{", "{", "{"}, 1, []bool{true, false, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var q Queue
			var ps []pair
			for _, says := range tc.says {
				p := connect(t, ln, says)
				ps = append(ps, p)
				q.Add(p.server, tc.limit)
			}
			for i, p := range ps {
				if got := closed(p); got != tc.wantClosed[i] {
					t.Errorf("connection %d (sent %q): closed = %v, want %v", i, tc.says[i], got, tc.wantClosed[i])
				}
			}
		})
	}
}
