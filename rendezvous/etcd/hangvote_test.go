package etcd

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
)

// waitHung waits for a declaration on ch.
func waitHung(t *testing.T, ch <-chan rendezvous.HangDeclared) rendezvous.HangDeclared {
	t.Helper()
	select {
	case d, ok := <-ch:
		if !ok {
			t.Fatal("the hang watch closed without a declaration")
		}
		return d
	case <-time.After(20 * time.Second):
		t.Fatal("no declaration within 20s")
	}
	return rendezvous.HangDeclared{}
}

// TestHangVoteNeedsEveryNode: the round is declared hung, by group rank
// 0, only once every node votes quiet; a node that moves again takes its
// vote back; every node's watch gets the one declaration.
func TestHangVoteNeedsEveryNode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	as := mustAgents(t, 3, Config{Shape: shape(t.Name(), 3, 3, 1)})
	rounds := nextAll(t, as, 1)
	watches := make([]<-chan rendezvous.HangDeclared, len(as))
	for i, a := range as {
		watches[i] = a.r.WatchHung(ctx, rounds[i])
	}
	vote := func(i int, quiet bool) {
		t.Helper()
		if err := as[i].r.VoteHang(ctx, rounds[i], quiet); err != nil {
			t.Fatal(err)
		}
	}
	// Two of three quiet, then one moves again, then the third is quiet:
	// still not every node at once.
	vote(0, true)
	vote(1, true)
	vote(1, false)
	vote(2, true)
	vote(1, true)
	// Declared after the last vote, not on the stale count of node 1's
	// first one.
	k := as[0].r.k
	last, err := as[0].cli.Get(ctx, k.hangVotes(rounds[0].Number)+"1")
	if err != nil || len(last.Kvs) != 1 {
		t.Fatalf("node 1's vote: %v, %v", last, err)
	}
	var id string
	for i := range as {
		d := waitHung(t, watches[i])
		if d.By != 0 || !strings.Contains(d.Why, "3 nodes") {
			t.Errorf("node %d: declaration %+v; want group rank 0's, naming the 3 nodes", i, d)
		}
		if i == 0 {
			decl, err := as[0].cli.Get(ctx, k.hangDeclared(rounds[0].Number))
			if err != nil || len(decl.Kvs) != 1 {
				t.Fatalf("the declaration: %v, %v", decl, err)
			}
			if decl.Kvs[0].CreateRevision < last.Kvs[0].ModRevision {
				t.Errorf("declared at revision %d, before node 1's last vote (%d)", decl.Kvs[0].CreateRevision, last.Kvs[0].ModRevision)
			}
		}
		if id == "" {
			id = d.ID
		} else if d.ID != id {
			t.Errorf("node %d: declaration %s; the others got %s", i, d.ID, id)
		}
	}
}

// TestHangDeclaredOnceAndStrangersRefused: a node's declaration with a
// cause stands for every node; a later one is refused; a value the job
// did not seal neither declares nor keeps the job from declaring.
func TestHangDeclaredOnceAndStrangersRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	as := mustAgents(t, 2, Config{Shape: shape(t.Name(), 2, 2, 1)})
	rounds := nextAll(t, as, 1)
	key := as[0].r.k.hangDeclared(rounds[0].Number)
	if _, err := as[0].cli.Put(ctx, key, `{"id":"forged","by":0,"why":"a stranger"}`); err != nil {
		t.Fatal(err)
	}
	w := as[0].r.WatchHung(ctx, rounds[0])
	if ok, err := as[1].r.DeclareHung(ctx, rounds[1], "rank 1 is outside any collective"); err != nil || !ok {
		t.Fatalf("DeclareHung: %v, %v; want it declared over the stranger's value", ok, err)
	}
	if ok, err := as[0].r.DeclareHung(ctx, rounds[0], "a later one"); err != nil || ok {
		t.Errorf("a second DeclareHung: %v, %v; want false", ok, err)
	}
	if d := waitHung(t, w); d.By != rounds[1].GroupRank || d.Why != "rank 1 is outside any collective" {
		t.Errorf("declaration %+v; want group rank %d's", d, rounds[1].GroupRank)
	}
}

// TestHangEvidenceShared: every node gets every node's evidence.
func TestHangEvidenceShared(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	as := mustAgents(t, 2, Config{Shape: shape(t.Name(), 2, 2, 1)})
	rounds := nextAll(t, as, 1)
	got := make(chan [][]byte, 2)
	for i := range as {
		go func() {
			reps, err := as[i].r.ShareHangEvidence(ctx, rounds[i], []byte{'0' + byte(i)}, 20*time.Second)
			if err != nil {
				t.Error(err)
			}
			got <- reps
		}()
	}
	for range as {
		reps := <-got
		var all []string
		for _, r := range reps {
			all = append(all, string(r))
		}
		slices.Sort(all)
		if strings.Join(all, ",") != "0,1" {
			t.Errorf("evidence %v; want both nodes'", all)
		}
	}
}
