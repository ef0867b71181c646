package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
)

// TestRecordsOfAnotherReleaseStopTheJob: a record of another version in
// the job's control keys (a node of another gorun release, or a holder
// of the token who writes one) stops this release's nodes with an error
// naming the version, wherever they meet it: waiting for the job's
// outcome, joining, or asking the job to stop. None waits for ever, and
// none mends the record (the other release would mend it back).
func TestRecordsOfAnotherReleaseStopTheJob(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	as := mustAgents(t, 2, Config{Shape: shape(t.Name(), 2, 2, 1)})
	rounds := nextAll(t, as, 1)
	put := func(key, record string) {
		t.Helper()
		if _, err := as[0].cli.Put(ctx, key, as[0].r.g.Seal(key, record)); err != nil {
			t.Fatal(err)
		}
	}
	wantForeign := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, rendezvous.ErrShapeMismatch) || !strings.Contains(err.Error(), "version 2") {
			t.Errorf("%s: %v; want a refusal naming version 2", what, err)
		}
	}

	// Waiting for the outcome: the other release's outcome ends the wait.
	done := make(chan error, 2)
	for i, a := range as {
		go func() { done <- a.r.Succeed(ctx, rounds[i]) }()
	}
	put(as[0].r.k.outcome(), `{"v":2,"kind":"outcome","data":{"how":"succeeded"}}`)
	for range as {
		select {
		case err := <-done:
			if err != nil {
				wantForeign("Succeed", err)
			}
		case <-ctx.Done():
			t.Fatal("Succeed still waits with another release's outcome in the store")
		}
	}

	// Joining: the other release's round counter stops the node, and
	// stays as it was written.
	roundKey := as[0].r.k.round()
	put(roundKey, `{"v":2,"kind":"round_counter","data":7}`)
	before, err := as[0].cli.Get(ctx, roundKey)
	if err != nil {
		t.Fatal(err)
	}
	_, err = as[1].r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
	wantForeign("Next", err)
	after, err := as[0].cli.Get(ctx, roundKey)
	if err != nil || after.Kvs[0].ModRevision != before.Kvs[0].ModRevision {
		t.Errorf("the other release's round counter was rewritten (revision %d, then %d: %v)", before.Kvs[0].ModRevision, after.Kvs[0].ModRevision, err)
	}

	// Asking to stop: a stop request this release cannot read is no
	// success.
	put(as[0].r.k.stop(), `{"v":2,"kind":"stop_request","data":{"reason":"other"}}`)
	wantForeign("RequestStop", as[0].r.RequestStop(ctx, rendezvous.StopRequest{Reason: "test"}))
}
