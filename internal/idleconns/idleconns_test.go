package idleconns

import (
	"net"
	"strings"
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

// cutOff says whether p's reader is cut off: the caller sends a byte, and
// the store's end cannot read it.
func cutOff(t *testing.T, p pair) bool {
	t.Helper()
	if _, err := p.caller.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_, err := p.server.Read(make([]byte, 1))
	return err != nil
}

// TestAddCutsOffTheSilentFirst: past the limit, the reader of the oldest
// connection that said nothing is cut off, not an older one whose first
// bytes wait unread (a peer whose reader is late under load); past twice
// the limit, the oldest is cut off whatever it sent. A reader that has
// just read its first bytes keeps its connection once it removed it from
// the queue and set its own deadline (a close lost that peer's hello:
// the flood test's node 1, closed without a word).
func TestAddCutsOffTheSilentFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const readIt = "{, read" // sent "{", and the reader has read it
	cases := []struct {
		name    string
		says    []string // what each caller sent, in order of arrival
		limit   int
		wantCut []bool
	}{
		{"a peer before the flood", []string{"{", "", ""}, 2, []bool{false, true, false}},
		{"all silent", []string{"", "", ""}, 2, []bool{true, false, false}},
		{"all spoke, within twice the limit", []string{"{", "{", "{"}, 2, []bool{false, false, false}},
		{"all spoke, past twice the limit", []string{"{", "{", "{"}, 1, []bool{true, false, false}},
		{"a peer read, not yet removed", []string{readIt, "", ""}, 1, []bool{false, true, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var q Queue
			var ps []pair
			for _, says := range tc.says {
				p := connect(t, ln, strings.TrimSuffix(says, ", read"))
				ps = append(ps, p)
				if err := p.server.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
					t.Fatal(err)
				}
				q.Add(p.server, tc.limit)
				if says == readIt {
					if _, err := p.server.Read(make([]byte, 1)); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, p := range ps {
				if tc.says[i] == readIt {
					// Its reader, as the callers of Add do: out of the
					// queue, then its own deadline.
					q.Remove(p.server)
					_ = p.server.SetReadDeadline(time.Time{})
				}
				if got := cutOff(t, p); got != tc.wantCut[i] {
					t.Errorf("connection %d (sent %q): cut off = %v, want %v", i, tc.says[i], got, tc.wantCut[i])
				}
			}
		})
	}
}
