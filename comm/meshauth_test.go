package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/memory"
)

// rankGroup makes rank r's group of size on the store at addr, logging
// to log.
func rankGroup(ctx context.Context, t *testing.T, addr string, r, size int, transport string, log io.Writer) (*Group, *memory.Allocator, error) {
	d := memory.NewSimDevice(1 << 30)
	t.Cleanup(d.Close)
	a := memory.NewAllocator(d, memory.AllocatorConfig{})
	c, err := DialStore(ctx, addr, testSecret)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { c.Close() })
	g, err := NewGroup(ctx, c, r, size, "127.0.0.1", Options{Device: d, Allocator: a, Engine: memory.NewEngine(a, memory.ModeAvoidRecordStream),
		Timeout: 20 * time.Second, Secret: testSecret, Transport: transport, Log: log})
	if err == nil {
		t.Cleanup(func() { g.Close() })
	}
	return g, a, err
}

// stranger connects to a mesh listener at addr, reads its challenge and
// sends what answer makes of the nonce; it returns what the listener
// sent after the challenge (before it closed the connection).
func stranger(t *testing.T, addr string, answer func(nonce []byte) []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	hello := make([]byte, len(meshMagic)+nonceLen)
	if _, err := io.ReadFull(c, hello); err != nil {
		t.Fatalf("no challenge: %v", err)
	}
	if string(hello[:4]) != meshMagic {
		t.Fatalf("challenge %q", hello)
	}
	if _, err := c.Write(answer(hello[4:])); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the listener did not close the connection: %v", err)
	}
	return rest
}

// claim is the dialer's answer of rank from to listener 0 at addr, with
// the MAC under secret.
func claim(secret Secret, addr string, from int) func([]byte) []byte {
	return func(nl []byte) []byte {
		cfg := meshConfig{prefix: "pg//", secret: secret}
		nd := make([]byte, nonceLen)
		b := binary.LittleEndian.AppendUint32(nil, uint32(from))
		b = append(b, nd...)
		return append(b, cfg.meshMAC(labelMeshDial, addr, from, 0, nl, nd)...)
	}
}

// TestMeshRefusesStrangers: before rank 1 connects, strangers connect to
// rank 0's mesh listener with garbage, with a wrong secret, with a
// well-formed claim of rank 1 without the secret, with the secret but a
// rank out of range, and one says nothing. Each is refused (logged once
// with its address and what was wrong) and sent nothing but the
// challenge, so no ring name; then rank 1 connects and the group works,
// on both transports.
func TestMeshRefusesStrangers(t *testing.T) {
	for _, transport := range []string{TransportSHM, TransportTCP} {
		t.Run(transport, func(t *testing.T) {
			srv := serveStore(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			probe, err := DialStore(ctx, srv.Addr(), testSecret)
			if err != nil {
				t.Fatal(err)
			}
			defer probe.Close()
			log := &proctest.Buffer{}
			type made struct {
				g   *Group
				a   *memory.Allocator
				err error
			}
			results := make([]chan made, 2)
			start := func(r int) {
				results[r] = make(chan made, 1)
				go func() {
					g, a, err := rankGroup(ctx, t, srv.Addr(), r, 2, transport, log)
					results[r] <- made{g, a, err}
				}()
			}
			start(0)
			addr, err := probe.Get(ctx, "pg//addr/0")
			if err != nil {
				t.Fatal(err)
			}
			// The silent one first: it holds a slot and must not stop the others.
			silent, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Close()
			cases := []struct {
				name   string
				answer func([]byte) []byte
				logged string
			}{
				{"garbage", func([]byte) []byte { return []byte(strings.Repeat("garbage!", 9)[:4+nonceLen+32]) }, "without proving it knows GORUN_JOB_SECRET"},
				{"wrong secret", claim(otherSecret(t), addr, 1), "claims rank 1 without proving it knows GORUN_JOB_SECRET"},
				{"rank 1 without the secret", claim(nil, addr, 1), "claims rank 1 without proving"},
				{"rank out of range", claim(testSecret, addr, 7), "claims rank 7: want a rank above 0 and below 2"},
				{"itself", claim(testSecret, addr, 0), "claims rank 0: want a rank above 0"},
			}
			for i, tc := range cases {
				if got := stranger(t, addr, tc.answer); len(got) != 0 {
					t.Errorf("%s: the listener sent %q after the challenge", tc.name, got)
				}
				proctest.WaitFor(t, "the refusal to be logged", 10*time.Second, func() bool {
					return strings.Count(log.String(), "refused a mesh connection from 127.0.0.1:") == i+1
				})
				if !strings.Contains(log.String(), tc.logged) {
					t.Errorf("%s: log lacks %q:\n%s", tc.name, tc.logged, log.String())
				}
			}
			// A real rank that dials with the wrong secret is refused too.
			bad := meshConfig{prefix: "pg//", rank: 1, size: 2, secret: otherSecret(t)}
			if c, err := bad.dialPeer(ctx, 0, addr); err == nil || !strings.Contains(err.Error(), "refused") {
				t.Errorf("a dialer with the wrong secret: %v", err)
				if c != nil {
					c.Close()
				}
			}
			start(1)
			var groups [2]made
			for r := range 2 {
				groups[r] = <-results[r]
				if groups[r].err != nil {
					t.Fatalf("rank %d: %v", r, groups[r].err)
				}
			}
			if got := groups[0].g.backend.(*cpuBackend).mesh.peers[1].shm != nil; got != (transport == TransportSHM) {
				t.Errorf("shared memory with rank 1: %v", got)
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for r, m := range groups {
				wg.Add(1)
				go func() {
					defer wg.Done()
					x, err := m.a.Empty(4*8, 0)
					if err != nil {
						errs[r] = err
						return
					}
					defer x.Release()
					setValues(x, Float32, []float64{float64(r + 1)})
					if errs[r] = Sync(ctx)(m.g.AllReduce(x, Float32, Sum)); errs[r] == nil && values(x, Float32)[0] != 3 {
						errs[r] = fmt.Errorf("all_reduce: %v", values(x, Float32)[0])
					}
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			// The silent stranger got the challenge and, once the mesh was
			// complete, the close.
			_ = silent.SetDeadline(time.Now().Add(30 * time.Second))
			if got, err := io.ReadAll(silent); err != nil || len(got) != len(meshMagic)+nonceLen {
				t.Errorf("the silent stranger: %d bytes, %v", len(got), err)
			}
		})
	}
}

// A dialer does not believe a listener that cannot prove it knows the
// secret.
func TestMeshDialerRefusesFakeListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(append([]byte(meshMagic), make([]byte, nonceLen)...))
		_, _ = io.ReadFull(c, make([]byte, 4+nonceLen+32))
		_, _ = c.Write(make([]byte, 32))
		_, _ = io.Copy(io.Discard, c)
	}()
	cfg := meshConfig{prefix: "pg//", rank: 1, size: 2, secret: testSecret}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c, err := cfg.dialPeer(ctx, 0, ln.Addr().String()); err == nil || !strings.Contains(err.Error(), "did not prove") {
		t.Errorf("fake listener: %v", err)
		if c != nil {
			c.Close()
		}
	}
	<-done
}
