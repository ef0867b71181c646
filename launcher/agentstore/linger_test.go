package agentstore

import (
	"context"
	"net"
	"strconv"
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
