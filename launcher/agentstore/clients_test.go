package agentstore

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWaitIdle: the store is idle once every client that sent a query
// has gone; a connection that never said anything does not hold it.
func TestWaitIdle(t *testing.T) {
	t.Parallel()
	s := serve(t)
	addr := "127.0.0.1:" + strconv.Itoa(s.Port())
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	client, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte{0, 1, 0, 0, 0}); err != nil { // the start of a query
		t.Fatal(err)
	}
	// Busy once the store read it.
	ctx := context.Background()
	for deadline := time.Now().Add(time.Minute); s.WaitIdle(ctx, 0); {
		if time.Now().After(deadline) {
			t.Fatal("still idle a minute after a client began a query")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s.WaitIdle(ctx, 100*time.Millisecond) {
		t.Fatal("idle with a client in the middle of a query")
	}
	client.Close()
	if !s.WaitIdle(ctx, time.Minute) {
		t.Fatal("not idle once the client left (a silent connection remains)")
	}
}

// TestAStalledWaiterHoldsNoSetter: a client that parks a WAIT and then
// stops reading (its replies pile up until the store's writes to it
// block) does not hold the client whose SET releases that WAIT: the
// setter's next query is answered.
func TestAStalledWaiterHoldsNoSetter(t *testing.T) {
	t.Parallel()
	s := serve(t)
	setter, stalled := dial(t, s), dial(t, s)
	if tc, ok := stalled.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	big := make([]byte, 1<<20)
	if _, err := setter.Write(query(1, field([]byte("big")), field(big))); err != nil { // SET big
		t.Fatal(err)
	}
	getBig := query(3, field([]byte("big")))
	// The same connection's GET answered: the SET was applied.
	if _, err := setter.Write(getBig); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(setter, make([]byte, 8+len(big))); err != nil {
		t.Fatal(err)
	}
	// WAIT for "k", then GETs it never reads: 64 MiB of replies.
	stall := query(6, u64Bytes(1), field([]byte("k")))
	for range 64 {
		stall = append(stall, getBig...)
	}
	go stalled.Write(stall) // blocks too, once the store stops reading it
	// Once the store is stuck writing to the stalled client, SET "k"
	// (releasing its WAIT) and ask for it back.
	waitStuck(t, s)
	if _, err := setter.Write(append(query(1, field([]byte("k")), field([]byte("v"))), query(3, field([]byte("k")))...)); err != nil {
		t.Fatal(err)
	}
	_ = setter.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 9)
	if _, err := io.ReadFull(setter, got); err != nil || string(got[8:]) != "v" {
		t.Fatalf("the setter's GET: %q, %v; want its value, not a store held by the stalled client", got, err)
	}
}

// waitStuck waits until the store holds a parked WAIT and is stuck
// writing to its client: the connection's writer stays locked (a reply
// of 1 MiB that the client does not read never ends), 20 looks in a row.
func waitStuck(t *testing.T, s *Server) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for held := 0; held < 20; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the store is not stuck writing to the stalled client within a minute")
		}
		s.mu.Lock()
		var c *conn
		for _, ws := range s.waiting {
			c = ws[0].c
		}
		s.mu.Unlock()
		switch {
		case c == nil:
			held = 0
		case c.wmu.TryLock():
			c.wmu.Unlock()
			held = 0
		default:
			held++
		}
	}
}

// TestParkedWaitsCostTheirKeyOnly: a WAIT is parked at the first of its
// keys still missing, so that a SET of another key does not look at it
// again (a client that parked WAITs listing a key 100,000 times slowed
// every SET of that key); a connection parks at most maxParked.
func TestParkedWaitsCostTheirKeyOnly(t *testing.T) {
	t.Parallel()
	s, hook := serveLogged(t)
	setter, waiter := dial(t, s), dial(t, s)
	if _, err := setter.Write(query(1, field([]byte("a")), field([]byte("1")))); err != nil { // SET a
		t.Fatal(err)
	}
	wait := query(6, u64Bytes(100_001))
	for range 100_000 {
		wait = append(wait, field([]byte("a"))...)
	}
	wait = append(wait, field([]byte("missing"))...)
	for range maxParked {
		if _, err := waiter.Write(wait); err != nil {
			t.Fatal(err)
		}
	}
	// Parked at "missing", none at "a": a SET of "a" finds none of them.
	deadline := time.Now().Add(time.Minute)
	for {
		s.mu.Lock()
		atA, atMissing := len(s.waiting["a"]), len(s.waiting["missing"])
		s.mu.Unlock()
		if atA != 0 {
			t.Fatalf("%d WAITs parked at a, which exists", atA)
		}
		if atMissing == maxParked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d WAITs parked at missing after a minute; want %d", atMissing, maxParked)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := waiter.Write(wait); err != nil { // one too many
		t.Fatal(err)
	}
	_ = waiter.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := waiter.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("read %v; want the connection closed for its WAIT past %d", err, maxParked)
	}
	logged := false
	for _, e := range hook.AllEntries() {
		logged = logged || strings.Contains(e.Message, "more than 4 WAITs or BARRIERs parked at once")
	}
	if !logged {
		t.Error("no log line for the WAIT past the limit")
	}
	// Its WAITs go with it (the store forgets it once it closed it).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		parked := len(s.waiting)
		s.mu.Unlock()
		if parked == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("WAITs of %d keys still parked a minute after their connection closed", parked)
		}
	}
}

// TestMultiGetCopiesNoValue: a MULTI_GET that lists one large key many
// times, from clients that do not read, costs the store the value once,
// not once per key listed (1,000 copies of 1 MiB on three connections
// took 3.1 GB).
func TestMultiGetCopiesNoValue(t *testing.T) {
	s := serve(t)
	setter := dial(t, s)
	if _, err := setter.Write(query(1, field([]byte("big")), field(make([]byte, 1<<20)))); err != nil {
		t.Fatal(err)
	}
	// The same connection's GET answered: the SET was applied.
	if _, err := setter.Write(query(3, field([]byte("big")))); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(setter, make([]byte, 8+1<<20)); err != nil {
		t.Fatal(err)
	}
	get := query(10, u64Bytes(1000)) // MULTI_GET, 2.x's number
	for range 1000 {
		get = append(get, field([]byte("big"))...)
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 3 {
		c := dial(t, s)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		if _, err := c.Write(get); err != nil {
			t.Fatal(err)
		}
	}
	// Every reply under way: each connection's writer held, stuck.
	deadline := time.Now().Add(time.Minute)
	for stuck := 0; stuck < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replies are not under way within a minute")
		}
		stuck = 0
		s.mu.Lock()
		for c := range s.conns {
			if c.spoke.Load() && !c.wmu.TryLock() {
				stuck++
			} else if c.spoke.Load() {
				c.wmu.Unlock()
			}
		}
		s.mu.Unlock()
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 256<<20 {
		t.Errorf("the store's heap grew %d MiB for three MULTI_GETs; want about nothing", grew>>20)
	}
}
