package comm

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// otherSecret is a secret that is not testSecret.
func otherSecret(t testing.TB) Secret {
	t.Helper()
	h, err := NewSecretHex()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSecret(h)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// greeted connects to srv and reads its challenge.
func greeted(t *testing.T, addr string) (net.Conn, *bufio.Reader, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, storeGreeting) {
		t.Fatalf("greeting %q, %v", line, err)
	}
	nonce, ok := parseHex(strings.TrimSpace(strings.TrimPrefix(line, storeGreeting)), nonceLen)
	if !ok {
		t.Fatalf("greeting %q: no nonce", line)
	}
	return c, r, nonce
}

// authAs answers the challenge with the MAC under secret.
func authAs(secret Secret, nonce []byte) string {
	mine := make([]byte, nonceLen)
	return "AUTH " + hex.EncodeToString(mine) + " " + hex.EncodeToString(secretMAC(secret, labelStoreClient, nonce, mine)) + "\n"
}

// stream writes n bytes of 'x' (no newline) to c in 1 MiB pieces until
// it is done, the server ends the connection or stop closes.
func stream(c net.Conn, n int, stop <-chan struct{}) {
	piece := []byte(strings.Repeat("x", 1<<20))
	for sent := 0; sent < n; sent += len(piece) {
		select {
		case <-stop:
			return
		default:
		}
		if _, err := c.Write(piece); err != nil {
			return
		}
	}
}

// TestStoreRefusesStrangers: connections without the secret, with the
// wrong one, with an endless line, with an oversized key or value, or
// with a request the store does not know are each answered with an error
// naming what is wrong and closed; the store goes on serving the real
// ranks, and no request made it buffer more than its limit.
func TestStoreRefusesStrangers(t *testing.T) {
	srv := serveStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rank, err := DialStore(ctx, srv.Addr(), testSecret)
	if err != nil {
		t.Fatal(err)
	}
	defer rank.Close()
	const huge = 100 << 20 // more than MaxValueLen, no newline
	cases := []struct {
		name string
		auth string // "": the right answer
		send func(c net.Conn, stop <-chan struct{})
		want string
	}{
		{name: "garbage", auth: "hello, is this the store?\n", want: "want AUTH <nonce> <mac>"},
		{name: "wrong secret", auth: "wrong", want: "wrong or missing GORUN_JOB_SECRET"},
		{name: "no secret", auth: "none", want: "wrong or missing GORUN_JOB_SECRET"},
		{name: "endless answer", auth: "skip", send: func(c net.Conn, stop <-chan struct{}) { stream(c, huge, stop) }, want: "more than 256 bytes"},
		{name: "endless value", send: func(c net.Conn, stop <-chan struct{}) {
			if _, err := c.Write([]byte("SET k ")); err == nil {
				stream(c, huge, stop)
			}
		}, want: "the limit is 64 MiB (MaxValueLen)"},
		{name: "long key", send: func(c net.Conn, _ <-chan struct{}) {
			_, _ = c.Write([]byte("GET " + strings.Repeat("k", MaxKeyLen+1) + "\n"))
		}, want: "the limit is 4096 (MaxKeyLen)"},
		{name: "unknown request", send: func(c net.Conn, _ <-chan struct{}) { _, _ = c.Write([]byte("DEL k\n")) }, want: `unknown request "DEL": want SET, ADD, GET or ONCLOSE`},
		{name: "endless verb", send: func(c net.Conn, stop <-chan struct{}) { stream(c, huge, stop) }, want: "malformed request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, r, nonce := greeted(t, srv.Addr())
			answer := authAs(testSecret, nonce)
			switch tc.auth {
			case "wrong":
				answer = authAs(otherSecret(t), nonce)
			case "none":
				answer = authAs(nil, nonce)
			case "":
			default:
				answer = tc.auth
			}
			if tc.auth != "skip" {
				if _, err := c.Write([]byte(answer)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.auth == "" {
				if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "OK ") {
					t.Fatalf("the right secret: %q, %v", line, err)
				}
			}
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				if tc.send != nil {
					tc.send(c, stop)
				}
			}()
			line, err := r.ReadString('\n')
			close(stop)
			<-done
			if err != nil || !strings.HasPrefix(line, "ERR ") || !strings.Contains(line, tc.want) {
				t.Fatalf("answer %q, %v; want an ERR line with %q", line, err, tc.want)
			}
			if strings.Contains(line, testSecret.Reveal()) {
				t.Fatal("the answer holds the secret")
			}
			// Closed after the error.
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, r); err != nil && isTimeout(err) {
				t.Fatal("the connection stayed open after its error")
			}
			// The store still serves the real ranks.
			if err := rank.Set(ctx, "after/"+strings.ReplaceAll(tc.name, " ", "-"), "v"); err != nil {
				t.Fatalf("a real rank after the stranger: %v", err)
			}
		})
	}
	if peak := srv.peak.Load(); peak > MaxValueLen+1 {
		t.Errorf("a connection made the server buffer %d bytes; the limit is %d", peak, MaxValueLen+1)
	}
	if v, err := rank.Get(ctx, "after/endless-value"); err != nil || v != "v" {
		t.Errorf("get: %q, %v", v, err)
	}
}

// TestStoreStrangerHeap: a stranger streaming 100 MiB without a newline
// in place of its answer leaves the server's heap as it was.
func TestStoreStrangerHeap(t *testing.T) {
	srv := serveStore(t)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	c, r, _ := greeted(t, srv.Addr())
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); stream(c, 100<<20, stop) }()
	line, _ := r.ReadString('\n')
	close(stop)
	<-done
	if !strings.Contains(line, "more than 256 bytes") {
		t.Errorf("answer %q", line)
	}
	if grew := int64(heap()) - int64(before); grew > 8<<20 {
		t.Errorf("the heap grew by %d bytes", grew)
	}
}

// A client with the wrong secret is refused at once (no retries until
// its context ends); a client refuses a store that cannot prove it knows
// the secret.
func TestDialStoreAuthErrors(t *testing.T) {
	srv := serveStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := DialStore(ctx, srv.Addr(), otherSecret(t)); !errors.Is(err, ErrStoreAuth) || !strings.Contains(err.Error(), "wrong or missing GORUN_JOB_SECRET") {
		t.Errorf("wrong secret: %v; want ErrStoreAuth naming the variable", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Error("the refused client retried")
	}
	// A fake store: it greets and says OK to anything.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fake := make(chan struct{})
	go func() {
		defer close(fake)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte(storeGreeting + strings.Repeat("ab", nonceLen) + "\n"))
		_, _ = bufio.NewReader(c).ReadString('\n')
		_, _ = c.Write([]byte("OK " + strings.Repeat("cd", 32) + "\n"))
		_, _ = io.Copy(io.Discard, c)
	}()
	if _, err := DialStore(ctx, ln.Addr().String(), testSecret); !errors.Is(err, ErrStoreAuth) || !strings.Contains(err.Error(), "did not prove") {
		t.Errorf("fake store: %v; want ErrStoreAuth", err)
	}
	<-fake
}

// A connection that says nothing is closed after the handshake timeout.
func TestStoreSilentConnectionClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := serveStoreTimeout(ln, testSecret, 200*time.Millisecond)
	defer srv.Close()
	_, r, _ := greeted(t, srv.Addr())
	line, err := r.ReadString('\n') // the deadline of greeted is 30 s
	if err != nil || !strings.Contains(line, "no answer to the challenge within 200ms") {
		t.Errorf("silent connection: %q, %v", line, err)
	}
}

// The client refuses requests over the limits before sending them.
func TestStoreClientLimits(t *testing.T) {
	st := dialStore(t)
	ctx := context.Background()
	for _, tc := range []struct{ key, value, want string }{
		{"k", strings.Repeat("v", MaxValueLen+1), "the limit is 64 MiB"},
		{strings.Repeat("k", MaxKeyLen+1), "v", "the limit is 4096"},
		{"a key", "v", "without spaces"},
		{"k", "two\nlines", "newline"},
	} {
		if err := st.Set(ctx, tc.key, tc.value); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("set %.20q: %v; want %q", tc.key, err, tc.want)
		}
	}
	big := strings.Repeat("v", MaxValueLen)
	if err := st.Set(ctx, "big", big); err != nil {
		t.Fatalf("a value at the limit: %v", err)
	}
	if v, err := st.Get(ctx, "big"); err != nil || v != big {
		t.Errorf("get big: %d bytes, %v", len(v), err)
	}
}

func TestParseSecret(t *testing.T) {
	good := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct{ in, want string }{
		{good, ""},
		{good[:63], "want 64 hexadecimal digits (32 random bytes); it has 63 characters"},
		{good[:62] + "zz", "it has other characters"},
	} {
		s, err := ParseSecret(tc.in)
		switch {
		case tc.want == "" && (err != nil || !s.IsSet()):
			t.Errorf("%q: %v", tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), JobSecretEnv) || strings.Contains(err.Error(), tc.in)):
			t.Errorf("%q: %v; want an error naming %s and %q, not the value", tc.in, err, JobSecretEnv, tc.want)
		}
	}
	s, _ := ParseSecret(good)
	for _, out := range []string{s.String(), s.GoString(), fmt.Sprintf("%v %+v %#v %s", s, Launch{Secret: s}, Launch{Secret: s}, s)} {
		if strings.Contains(out, good) {
			t.Errorf("the secret prints itself: %s", out)
		}
	}
}
