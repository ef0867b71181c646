package nettest

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer echoes lines back on a free port.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestProxyCutHoldsBytesUntilHeal(t *testing.T) {
	p := NewProxy(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(msg string) (string, error) {
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := roundTrip("before"); err != nil || got != "before\n" {
		t.Fatalf("before the cut: %q, %v", got, err)
	}
	p.Cut()
	// While cut, nothing comes back: the read times out, the connection
	// stays open.
	if err := c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip("during"); err == nil {
		t.Fatalf("during the cut: got %q; want no answer", got)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	p.Heal()
	if got, err := r.ReadString('\n'); err != nil || got != "during\n" {
		t.Fatalf("after the heal, the held line: %q, %v", got, err)
	}
	if got, err := roundTrip("after"); err != nil || got != "after\n" {
		t.Fatalf("after the heal: %q, %v", got, err)
	}
}
