package etcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/setting"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/internal/testkit/leakcheck"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// server is the embedded etcd shared by this package's tests; each test
// uses its own run id.
var server *jobstore.Server

func TestMain(m *testing.M) {
	s, err := jobstore.StartServer(context.Background(), jobstore.ServerConfig{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server = s
	code := m.Run()
	s.Close()
	if code == 0 {
		if leaked := leakcheck.Wait(10 * time.Second); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "leakcheck: %d goroutines still running after the tests:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// testLog sends an agent's messages to the test's log.
func testLog(t *testing.T) logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(tWriter{t})
	return l
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// agent is one node's rendezvous with its own etcd client.
type agent struct {
	cli *clientv3.Client
	r   *Rendezvous
}

func newAgent(t *testing.T, cfg Config) (*agent, error) {
	t.Helper()
	return newAgentAt(t, server.Endpoints(), cfg)
}

// newAgentAt is newAgent with a client of endpoints (a proxy).
func newAgentAt(t *testing.T, endpoints []string, cfg Config) (*agent, error) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1"
	}
	if cfg.Log == nil {
		cfg.Log = testLog(t)
	}
	r, err := New(context.Background(), cli, cfg)
	if err != nil {
		cli.Close()
		return nil, err
	}
	a := &agent{cli: cli, r: r}
	t.Cleanup(func() {
		a.r.Close(context.Background())
		a.cli.Close()
	})
	return a, nil
}

func mustAgents(t *testing.T, n int, cfg Config) []*agent {
	t.Helper()
	var as []*agent
	for range n {
		c := cfg
		if c.NodeRank == 0 {
			c.NodeRank = -1
		}
		a, err := newAgent(t, c)
		if err != nil {
			t.Fatal(err)
		}
		as = append(as, a)
	}
	return as
}

// runIDs makes every test run's job id unique on the shared server, also
// under -count.
var (
	runIDMu sync.Mutex
	runIDN  int
)

func shape(run string, minN, maxN, nproc int) Shape {
	runIDMu.Lock()
	runIDN++
	id := fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(run, "/", "_"), os.Getpid(), runIDN)
	runIDMu.Unlock()
	return Shape{RunID: id, MinNodes: minN, MaxNodes: maxN, MaxRestarts: 1}
}

// nextAll runs Next on every agent at once.
func nextAll(t *testing.T, as []*agent, nproc int) []rendezvous.Round {
	t.Helper()
	rounds := make([]rendezvous.Round, len(as))
	errs := make([]error, len(as))
	var wg sync.WaitGroup
	for i, a := range as {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rounds[i], errs[i] = a.r.Next(ctx, rendezvous.Node{LocalWorldSize: nproc, Role: "default"})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("agent %d: Next: %v", i, err)
		}
	}
	return rounds
}

// checkRanks verifies one job view: unique group ranks 0..n-1, one master
// address, consistent global ranks.
func checkRanks(t *testing.T, rounds []rendezvous.Round, nproc int) {
	t.Helper()
	n := len(rounds)
	seen := map[int]bool{}
	for _, r := range rounds {
		if r.GroupWorldSize != n || r.WorldSize != n*nproc || r.BaseRank != r.GroupRank*nproc {
			t.Errorf("round %+v: inconsistent with %d nodes of %d workers", r, n, nproc)
		}
		if r.MasterAddr != rounds[0].MasterAddr || r.MasterPort != rounds[0].MasterPort || r.MasterPort == 0 || r.Number != rounds[0].Number {
			t.Errorf("round %+v: master or number differs from %+v", r, rounds[0])
		}
		seen[r.GroupRank] = true
	}
	for i := range n {
		if !seen[i] {
			t.Errorf("group rank %d missing: %+v", i, rounds)
		}
	}
}

func TestFixedSizeJobGetsUniqueRanks(t *testing.T) {
	t.Parallel()
	as := mustAgents(t, 4, Config{Shape: shape(t.Name(), 4, 4, 2)})
	rounds := nextAll(t, as, 2)
	checkRanks(t, rounds, 2)
}

func TestNodeRankHonoured(t *testing.T) {
	t.Parallel()
	var as []*agent
	job := shape(t.Name(), 3, 3, 1)
	for _, rank := range []int{2, 0, 1} {
		a, err := newAgent(t, Config{Shape: job, NodeRank: rank})
		if err != nil {
			t.Fatal(err)
		}
		as = append(as, a)
	}
	rounds := nextAll(t, as, 1)
	for i, want := range []int{2, 0, 1} {
		if rounds[i].GroupRank != want {
			t.Errorf("agent with --node-rank=%d got group rank %d", want, rounds[i].GroupRank)
		}
	}
}

func TestElasticRoundClosesAfterLastCall(t *testing.T) {
	t.Parallel()
	as := mustAgents(t, 2, Config{Shape: shape(t.Name(), 2, 4, 1), LastCallTimeout: 200 * time.Millisecond})
	start := time.Now()
	rounds := nextAll(t, as, 1)
	checkRanks(t, rounds, 1)
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("round closed after %v, before the last call ended", d)
	}
}

// TestShapeMismatchRefused: a node whose shape differs from the job's is
// refused with the reason, and the job of a fixed node count, which can
// no longer form, ends at once on the node that waits for it, with the
// refused node's reason.
func TestShapeMismatchRefused(t *testing.T) {
	t.Parallel()
	job := shape(t.Name(), 2, 2, 8)
	first := mustAgents(t, 1, Config{Shape: job})[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := make(chan error, 1)
	go func() {
		_, err := first.r.Next(ctx, rendezvous.Node{LocalWorldSize: 8, Role: "default"})
		waiting <- err
	}()
	// The first node records the job's shape when it joins.
	proctest.WaitFor(t, "the job's shape", 30*time.Second, func() bool {
		resp, err := first.cli.Get(ctx, first.r.k.shape())
		return err == nil && len(resp.Kvs) == 1
	})
	other := job
	other.MaxRestarts = 5
	// The refused node's own error names the setting as the library
	// does; the other nodes read it as ShowSetting names it.
	a, err := newAgent(t, Config{Shape: other, NodeRank: -1, ShowSetting: func(s setting.Name) string { return "--" + strings.ToLower(string(s)) }})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.r.Next(ctx, rendezvous.Node{LocalWorldSize: 8, Role: "default"})
	if !errors.Is(err, rendezvous.ErrShapeMismatch) || !strings.Contains(err.Error(), "MaxRestarts: this node has 5, the job has 1") {
		t.Fatalf("Next = %v; want a shape mismatch naming MaxRestarts", err)
	}
	select {
	case err := <-waiting:
		if err == nil || !strings.Contains(err.Error(), "cannot join the job") || !strings.Contains(err.Error(), "--maxrestarts: this node has 5, the job has 1") {
			t.Errorf("first node's Next = %v; want the job failed with the refused node's reason", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the first node still waits for a job that cannot form")
	}
}

func TestRunIDsDoNotMix(t *testing.T) {
	t.Parallel()
	a := mustAgents(t, 2, Config{Shape: shape(t.Name()+"-a", 2, 2, 1)})
	b := mustAgents(t, 2, Config{Shape: shape(t.Name()+"-b", 2, 2, 1)})
	ra := nextAll(t, a, 1)
	rb := nextAll(t, b, 1)
	checkRanks(t, ra, 1)
	checkRanks(t, rb, 1)
}

func TestJoinTimeoutNamesNodes(t *testing.T) {
	t.Parallel()
	as := mustAgents(t, 1, Config{Shape: shape(t.Name(), 2, 2, 1), JoinTimeout: 300 * time.Millisecond})
	_, err := as[0].r.Next(context.Background(), rendezvous.Node{LocalWorldSize: 1, Role: "default"})
	if !errors.Is(err, rendezvous.ErrJoinTimeout) || !strings.Contains(err.Error(), "1 in round 0: "+as[0].r.ID()) {
		t.Fatalf("Next = %v; want rendezvous.ErrJoinTimeout naming the node that joined", err)
	}
}

// waitEvent receives the event that ends a round.
func waitEvent(t *testing.T, ch <-chan rendezvous.Event) rendezvous.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch closed without an event")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30s")
	}
	return rendezvous.Event{}
}

func TestFailureRestartsEveryNodeWithOneBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	as := mustAgents(t, 3, Config{Shape: shape(t.Name(), 3, 3, 1)})
	rounds := nextAll(t, as, 1)
	w1 := as[1].r.Watch(ctx, rounds[1])
	w2 := as[2].r.Watch(ctx, rounds[2])
	restart, err := as[0].r.Fail(ctx, rounds[0], "rank 0 exited with code 1", 1, true)
	if err != nil || !restart {
		t.Fatalf("Fail = %v, %v; want a restart", restart, err)
	}
	for _, w := range []<-chan rendezvous.Event{w1, w2} {
		if ev := waitEvent(t, w); !ev.Failure || !strings.Contains(ev.Reason, "rank 0 exited") {
			t.Errorf("event %+v; want the failure", ev)
		}
	}
	// A second report of the same round's failure costs nothing.
	if restart, err := as[1].r.Fail(ctx, rounds[1], "collective error", 1, true); err != nil || !restart {
		t.Fatalf("second Fail = %v, %v", restart, err)
	}
	// Everyone rejoins; the same nodes need no last call; order is kept.
	again := nextAll(t, as, 1)
	checkRanks(t, again, 1)
	for i := range as {
		if again[i].Number != 1 || again[i].RestartCount != 1 || again[i].GroupRank != rounds[i].GroupRank {
			t.Errorf("agent %d: round %d rank %d; want round 1, rank %d as before", i, again[i].Number, again[i].GroupRank, rounds[i].GroupRank)
		}
	}
	// The budget (1 restart, job-wide) is spent: the next failure ends the job.
	if restart, err := as[2].r.Fail(ctx, again[2], "again", 1, true); err != nil || restart {
		t.Fatalf("Fail with the budget spent = %v, %v; want no restart", restart, err)
	}
	_, err = as[0].r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
	if !errors.Is(err, rendezvous.ErrJobFailed) {
		t.Fatalf("Next after the job failed = %v; want rendezvous.ErrJobFailed", err)
	}
}

func TestLostNodeEndsRoundAndSurvivorsReform(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := Config{Shape: shape(t.Name(), 2, 3, 1), LeaseTTL: 2 * time.Second, LastCallTimeout: 100 * time.Millisecond}
	as := mustAgents(t, 3, cfg)
	rounds := nextAll(t, as, 1)
	w0 := as[0].r.Watch(ctx, rounds[0])
	// Agent 2 dies without leaving: its client goes, its lease expires.
	as[2].cli.Close()
	ev := waitEvent(t, w0)
	if ev.Failure || !strings.Contains(ev.Reason, as[2].r.ID()) {
		t.Fatalf("event %+v; want a membership change naming %s", ev, as[2].r.ID())
	}
	again := nextAll(t, as[:2], 1)
	checkRanks(t, again, 1)
	if (again[0].GroupRank < again[1].GroupRank) != (rounds[0].GroupRank < rounds[1].GroupRank) {
		t.Errorf("survivors changed order: before %d,%d after %d,%d", rounds[0].GroupRank, rounds[1].GroupRank, again[0].GroupRank, again[1].GroupRank)
	}
}

func TestLateJoinerScalesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := Config{Shape: shape(t.Name(), 2, 3, 1), LastCallTimeout: 100 * time.Millisecond}
	as := mustAgents(t, 3, cfg)
	rounds := nextAll(t, as[:2], 1)
	w0 := as[0].r.Watch(ctx, rounds[0])
	w1 := as[1].r.Watch(ctx, rounds[1])
	late := make(chan rendezvous.Round, 1)
	go func() {
		r, err := as[2].r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
		if err != nil {
			t.Error(err)
		}
		late <- r
	}()
	for _, w := range []<-chan rendezvous.Event{w0, w1} {
		if ev := waitEvent(t, w); ev.Failure || !strings.Contains(ev.Reason, "waiting to join") {
			t.Errorf("event %+v; want a scale-up", ev)
		}
	}
	bigger := nextAll(t, as[:2], 1)
	all := append(bigger, <-late)
	checkRanks(t, all, 1)
	ranks := []int{all[0].GroupRank, all[1].GroupRank}
	sort.Ints(ranks)
	if all[2].GroupRank != 2 || ranks[0] != 0 || ranks[1] != 1 {
		t.Errorf("late joiner rank %d, survivors %v; want survivors first", all[2].GroupRank, ranks)
	}
}

func TestSucceedWaitsForEveryNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	as := mustAgents(t, 3, Config{Shape: shape(t.Name(), 3, 3, 1)})
	rounds := nextAll(t, as, 1)
	errs := make(chan error, 3)
	for i := range 2 {
		go func() { errs <- as[i].r.Succeed(ctx, rounds[i]) }()
	}
	select {
	case err := <-errs:
		t.Fatalf("Succeed returned %v before every node finished", err)
	case <-time.After(100 * time.Millisecond):
	}
	go func() { errs <- as[2].r.Succeed(ctx, rounds[2]) }()
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("Succeed = %v; want nil", err)
		}
	}
	if _, err := as[0].r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"}); !errors.Is(err, rendezvous.ErrJobSucceeded) {
		t.Errorf("Next after success = %v; want rendezvous.ErrJobSucceeded", err)
	}
}

func TestSucceededNodeRejoinsAfterAnotherFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	as := mustAgents(t, 2, Config{Shape: shape(t.Name(), 2, 2, 1)})
	rounds := nextAll(t, as, 1)
	done := make(chan error, 1)
	go func() { done <- as[0].r.Succeed(ctx, rounds[0]) }()
	if _, err := as[1].r.Fail(ctx, rounds[1], "boom", 1, true); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, rendezvous.ErrRoundEnded) {
		t.Fatalf("Succeed = %v; want rendezvous.ErrRoundEnded", err)
	}
	checkRanks(t, nextAll(t, as, 1), 1)
}

// TestLargeRoundCloses: more members than etcd's 128 operations per
// transaction. Agents share a few clients (each has its own lease).
func TestLargeRoundCloses(t *testing.T) {
	t.Parallel()
	const n = 150
	var clients []*clientv3.Client
	for range 4 {
		cli, err := clientv3.New(clientv3.Config{Endpoints: server.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		clients = append(clients, cli)
	}
	job := shape(t.Name(), n, n, 1)
	as := make([]*agent, n)
	for i := range as {
		r, err := New(context.Background(), clients[i%len(clients)], Config{Shape: job, NodeRank: -1, Addr: "127.0.0.1", Log: testLog(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		as[i] = &agent{cli: clients[i%len(clients)], r: r}
	}
	checkRanks(t, nextAll(t, as, 1), 1)
}

// TestSucceedAfterTheLeaseEnded: a node whose lease ended while its
// workers finished (it was stopped, or cut off, for longer than the TTL)
// reports their success under a new lease, and the job succeeds: the
// round was still the current one.
func TestSucceedAfterTheLeaseEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	as := mustAgents(t, 2, Config{Shape: shape(t.Name(), 2, 2, 1)})
	rounds := nextAll(t, as, 1)
	errs := make(chan error, 2)
	go func() { errs <- as[0].r.Succeed(ctx, rounds[0]) }()
	old := as[1].r.lease.Load()
	if _, err := as[1].cli.Revoke(ctx, old.id); err != nil {
		t.Fatal(err)
	}
	<-old.done
	go func() { errs <- as[1].r.Succeed(ctx, rounds[1]) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("Succeed = %v; want nil", err)
		}
	}
	if as[1].r.lease.Load() == old {
		t.Error("the node reported under its ended lease")
	}
}
