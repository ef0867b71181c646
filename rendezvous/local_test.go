package rendezvous

import (
	"net"
	"strconv"
	"testing"
)

// The master port is drawn outside the kernel's ephemeral range, where
// outgoing connections take theirs, and is free on the wildcard that
// TCPStore binds.
func TestFreePortOutsideTheEphemeralRange(t *testing.T) {
	low, high := ephemeralRange()
	for range 20 {
		p, err := FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if p >= low && p <= high {
			t.Fatalf("port %d is in the ephemeral range %d-%d", p, low, high)
		}
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(p)) // the wildcard, both families
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		ln.Close()
	}
}

func TestOutsideRange(t *testing.T) {
	for _, tc := range []struct {
		low, high int
		ok        func(p int) bool
	}{
		{32768, 60999, func(p int) bool { return (p >= minDrawnPort && p < 32768) || (p > 60999 && p <= 65535) }},
		{1024, 65535, func(p int) bool { return p == 0 }},                  // the whole range is ephemeral
		{5000, 20000, func(p int) bool { return p > 20000 && p <= 65535 }}, // nothing below it above 10000
	} {
		for range 200 {
			if p := outsideRange(tc.low, tc.high); !tc.ok(p) {
				t.Fatalf("range %d-%d: drew %d", tc.low, tc.high, p)
			}
		}
	}
}
