package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/rendezvous"
)

// failRound ends every agent's round with a failure (by the first) and
// returns the next round, joined by all.
func failRound(t *testing.T, as []*agent, rounds []rendezvous.Round) []rendezvous.Round {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if restart, err := as[0].r.Fail(ctx, rounds[0], "rank 0 failed", 1, true); err != nil || !restart {
		t.Fatalf("Fail: restart %v, %v", restart, err)
	}
	return nextAll(t, as, 1)
}

// twiceFailedJob is a job of two agents (up to 3 restarts) whose rounds
// 0 and 1 failed: its config, agents and round 2, and its log.
func twiceFailedJob(t *testing.T) (Config, []*agent, []rendezvous.Round, *syncBuf) {
	t.Helper()
	log := &syncBuf{}
	l := logrus.New()
	l.SetOutput(log)
	token, _ := rendezvous.NewToken()
	cfg := Config{Shape: shape(t.Name(), 2, 2, 1), Token: token, Log: l}
	cfg.Shape.MaxRestarts = 3
	as := mustAgents(t, 2, cfg)
	return cfg, as, failRound(t, as, failRound(t, as, nextAll(t, as, 1))), log
}

// nextOfOneRestart starts a node of cfg's job allowing one restart (the
// job allows 3) and returns it and its Next's error.
func nextOfOneRestart(ctx context.Context, t *testing.T, cfg Config) (*agent, error) {
	t.Helper()
	cfg.Shape.MaxRestarts = 1
	b, err := newAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
	return b, err
}

// restartsAt reads the restart counter's value and revision as agent a
// opens it (-1 if it is not this job's).
func restartsAt(t *testing.T, a *agent, rev int64) (int, int64) {
	t.Helper()
	key := a.r.k.restarts()
	resp, err := a.cli.Get(context.Background(), key, clientv3.WithRev(rev))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("get %s at %d: %v", key, rev, err)
	}
	kv := resp.Kvs[0]
	n := -1
	if payload, ok := a.r.g.Open(key, kv.Value, kv.ModRevision); ok && decodeRecord(payload, kindRestarts, &n) != nil {
		n = -1
	}
	return n, kv.ModRevision
}

// TestJoinerMendsWhatItRead: a node that joined by the guards alone
// knows the round and the shape only. A stranger's value on the restart
// counter is put right with the count the job has (from a full read),
// never with the 0 such a node would otherwise hold.
func TestJoinerMendsWhatItRead(t *testing.T) {
	t.Parallel()
	log := &syncBuf{}
	l := logrus.New()
	l.SetOutput(log)
	token, _ := rendezvous.NewToken()
	cfg := Config{Shape: shape(t.Name(), 3, 3, 1), Token: token, Log: l}
	cfg.Shape.MaxRestarts = 3
	as := mustAgents(t, 3, cfg)
	failRound(t, as, nextAll(t, as, 1)) // round 1: one restart
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Round 2's closer is agent 2, which never counts: the round stays
	// open, and agent 1 is its only joiner, by the guards alone.
	if restart, err := as[0].r.Fail(ctx, rendezvous.Round{Number: 1}, "rank 0 failed again", 1, true); err != nil || !restart {
		t.Fatalf("Fail: restart %v, %v", restart, err)
	}
	closer := as[2].r.k.closer(2)
	if _, err := as[2].cli.Put(ctx, closer, as[2].r.seal(closer, kindCloser, as[2].r.id), clientv3.WithLease(as[2].r.lease.Load().id)); err != nil {
		t.Fatal(err)
	}
	joined := make(chan error, 1)
	go func() {
		_, err := as[1].r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
		joined <- err
	}()
	proctest.WaitFor(t, "agent 1 in round 2", 10*time.Second, func() bool {
		resp, err := as[1].cli.Get(ctx, as[1].r.k.joinPrefix(2), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 1
	})
	if n, _ := restartsAt(t, as[1], 0); n != 2 {
		t.Fatalf("restart count %d before the stranger, want 2", n)
	}
	forged, err := rawClient(t).Put(ctx, as[1].r.k.restarts(), "garbage")
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, log, "mended "+as[1].r.k.restarts())
	for rev := forged.Header.Revision + 1; ; rev++ {
		resp, err := as[1].cli.Get(ctx, "x", clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if rev > resp.Header.Revision {
			break
		}
		if n, at := restartsAt(t, as[1], rev); at == rev && n != 2 {
			t.Errorf("revision %d: the restart counter was put back as %d, want 2\n%s", rev, n, log)
		}
	}
	cancel()
	if err := <-joined; !errors.Is(err, context.Canceled) {
		t.Errorf("agent 1's Next: %v, want it cancelled", err)
	}
}

// TestRefusedShapeLeavesTheJobAlone: a node of another shape (fewer
// restarts allowed than the job used) is refused, and neither refuses
// nor removes the job's round records, which it reads by the job's
// shape (it deleted the running round's record, and a node then waited
// for ever).
func TestRefusedShapeLeavesTheJobAlone(t *testing.T) {
	t.Parallel()
	cfg, _, rounds, log := twiceFailedJob(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := nextOfOneRestart(ctx, t, cfg)
	if !errors.Is(err, rendezvous.ErrShapeMismatch) || !strings.Contains(err.Error(), "MaxRestarts") {
		t.Errorf("the other node's Next: %v, want refused for its restarts", err)
	}
	for r := 0; r <= rounds[0].Number; r++ {
		resp, err := b.cli.Get(ctx, b.r.k.closed(r), clientv3.WithCountOnly())
		if err != nil || resp.Count != 1 {
			t.Errorf("round %d's record after the other node: %v, count %d; want it kept", r, err, resp.Count)
		}
	}
	if strings.Contains(log.String(), "refused") || strings.Contains(log.String(), "mended") {
		t.Errorf("the job's own records were refused or mended:\n%s", log)
	}
}

// TestDeletedShapeIsNotMadeAgain: when someone who can write to the store
// deletes a running job's shape (and its round counter), a node of
// another shape is refused, saying so, and does not make the job again:
// the job's other keys stay as they were (it reset the counters, then
// removed the records it judged by its own shape, and rewrote the
// restart counter in a loop). The running nodes put the shape back at
// their next round, which forms with the right restart count.
func TestDeletedShapeIsNotMadeAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		deleted func(k keys) []string
	}{
		{"shape", func(k keys) []string { return []string{k.shape()} }},
		{"shape and round", func(k keys) []string { return []string{k.shape(), k.round()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, as, rounds, log := twiceFailedJob(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			before, err := as[0].cli.Get(ctx, as[0].r.k.ctl(), clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			deleted := map[string]bool{}
			for _, key := range tc.deleted(as[0].r.k) {
				deleted[key] = true
				if _, err := rawClient(t).Delete(ctx, key); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := nextOfOneRestart(ctx, t, cfg); !errors.Is(err, rendezvous.ErrShapeMismatch) || !strings.Contains(err.Error(), "is gone while its rounds are there") {
				t.Errorf("Next on a job whose shape was deleted: %v; want refused, saying so", err)
			}
			after, err := as[0].cli.Get(ctx, as[0].r.k.ctl(), clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			kept := map[string]string{}
			for _, kv := range after.Kvs {
				kept[string(kv.Key)] = string(kv.Value)
			}
			for _, kv := range before.Kvs {
				if key := string(kv.Key); !deleted[key] && kept[key] != string(kv.Value) {
					t.Errorf("%s changed or went after the refused node", key)
				}
			}
			if strings.Contains(log.String(), "mended") {
				t.Errorf("something was mended:\n%s", log)
			}
			next := failRound(t, as, rounds)
			if next[0].Number != 3 || next[0].RestartCount != 3 {
				t.Errorf("the running nodes' next round: %d with %d restarts, want 3 with 3\n%s", next[0].Number, next[0].RestartCount, log)
			}
			if resp, err := as[0].cli.Get(ctx, as[0].r.k.shape(), clientv3.WithCountOnly()); err != nil || resp.Count != 1 {
				t.Errorf("the job's shape after the running nodes' next round: %v; want it put back", err)
			}
		})
	}
}

// TestRestartCountOutlivesDeletedEnds: the restart counter, forged after
// the ends of the rounds it counts were deleted, is put back to at least
// the count the last round's record closed with (it went back to 0,
// handing the job its restarts again).
func TestRestartCountOutlivesDeletedEnds(t *testing.T) {
	t.Parallel()
	_, as, _, _ := twiceFailedJob(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw := rawClient(t)
	for _, key := range []string{as[0].r.k.end(0), as[0].r.k.end(1)} {
		if _, err := raw.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.Put(ctx, as[0].r.k.restarts(), "garbage"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := as[0].r.readControl(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := restartsAt(t, as[0], 0); n != 2 {
		t.Errorf("restart counter put back as %d, want 2", n)
	}
}

// TestStrangersRoundCounterBeforeTheJob: a round counter a stranger wrote
// before the job existed is replaced when the job is made: the job
// forms (a stranger's counter is no sign of a job).
func TestStrangersRoundCounterBeforeTheJob(t *testing.T) {
	t.Parallel()
	token, _ := rendezvous.NewToken()
	cfg := Config{Shape: shape(t.Name(), 2, 2, 1), Token: token, Log: testLog(t)}
	probe := &Rendezvous{k: newKeys(DefaultPrefix, cfg.Shape.RunID)}
	if _, err := rawClient(t).Put(context.Background(), probe.k.round(), "7"); err != nil {
		t.Fatal(err)
	}
	rounds := nextAll(t, mustAgents(t, 2, cfg), 1)
	if rounds[0].Number != 0 {
		t.Errorf("the job's first round is %d, want 0", rounds[0].Number)
	}
}

// TestStrangersRoundEndBeforeTheJob: a round's end that a stranger wrote
// before the job existed stops the job's creation (no job is made over a
// round's record or end); the node is refused naming the keys, not its
// token.
func TestStrangersRoundEndBeforeTheJob(t *testing.T) {
	t.Parallel()
	token, _ := rendezvous.NewToken()
	cfg := Config{Shape: shape(t.Name(), 1, 1, 1), Token: token, Log: testLog(t)}
	probe := &Rendezvous{k: newKeys(DefaultPrefix, cfg.Shape.RunID)}
	if _, err := rawClient(t).Put(context.Background(), probe.k.end(7), "junk"); err != nil {
		t.Fatal(err)
	}
	a := mustAgents(t, 1, cfg)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := a.r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
	if !errors.Is(err, rendezvous.ErrShapeMismatch) || !strings.Contains(err.Error(), "keys that this job did not seal are there") {
		t.Errorf("Next over a stranger's round end: %v; want refused, naming the keys", err)
	}
}
