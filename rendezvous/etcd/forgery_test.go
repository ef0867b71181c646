package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/rendezvous"
)

// syncBuf collects log lines from several goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitLog waits until the log holds want.
func waitLog(t *testing.T, log *syncBuf, want string) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("the log:\n%s", log)
		}
	}()
	proctest.WaitFor(t, fmt.Sprintf("a log line with %q", want), 10*time.Second, func() bool { return strings.Contains(log.String(), want) })
}

func rawClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: server.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestForgedValuesAreRefused writes, into a running round, what a client
// with access to etcd but without the job's token could: each value is
// refused with a log line naming its key, the round goes on, and the job
// completes.
func TestForgedValuesAreRefused(t *testing.T) {
	t.Parallel()
	forged := `{"round":0,"size":2,"world_size":2,"master_addr":"203.0.113.66","master_port":1234,"restarts":0,"shape_hash":"x"}`
	cases := []struct {
		name, key, value string
		// readAtEnd: the nodes report success at once, without waiting
		// for the forged value's refusal.
		readAtEnd bool
	}{
		{"round record", "ctl/closed/0", forged, false},
		{"next round record", "ctl/closed/1", strings.Replace(forged, `"round":0`, `"round":1`, 1), false},
		{"malformed round", "ctl/round", "abc", false},
		{"round put back", "ctl/round", "0\n#AAAA", false},
		// Forged as the nodes report: their fenced reports must not take
		// it for the round's end.
		{"round as nodes report", "ctl/round", "abc", true},
		{"outcome", "ctl/outcome", "failed: forged", false},
		{"restarts", "ctl/restarts", "-5", false},
		{"oversized", "ctl/junk", strings.Repeat("x", 1<<20), false},
		{"waiting node", "join/1/evil", `{"id":"evil","addr":"203.0.113.66","master_port":1234,"nproc":1,"node_rank":-1,"prev_rank":-1,"prev_round":-1}`, false},
		{"done", "done/0/evil", "ok", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log := &syncBuf{}
			l := logrus.New()
			l.SetOutput(log)
			token, _ := rendezvous.NewToken()
			cfg := Config{Shape: shape(t.Name(), 2, 3, 1), Token: token, Log: l, LastCallTimeout: 50 * time.Millisecond}
			as := mustAgents(t, 2, cfg)
			rounds := nextAll(t, as, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			events := make([]<-chan rendezvous.Event, 2)
			for i, a := range as {
				events[i] = a.r.Watch(ctx, rounds[i])
			}
			key := as[0].r.k.root + tc.key
			if _, err := rawClient(t).Put(ctx, key, tc.value); err != nil {
				t.Fatal(err)
			}
			if !tc.readAtEnd {
				waitLog(t, log, "refused the value of "+key)
			}
			errs := make(chan error, 2)
			for i, a := range as {
				go func() { errs <- a.r.Succeed(ctx, rounds[i]) }()
			}
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatalf("Succeed after a forged %s: %v\n%s", key, err, log.String())
				}
			}
			waitLog(t, log, "refused the value of "+key)
			for i, ch := range events {
				select {
				case ev, ok := <-ch:
					if ok && !strings.HasPrefix(ev.Reason, "the job succeeded") {
						t.Errorf("agent %d: the forged %s ended the round: %q", i, key, ev.Reason)
					}
				default:
				}
			}
			if strings.Contains(log.String(), "203.0.113.66") || strings.Contains(log.String(), "xxxxxxxx") {
				t.Errorf("a forged value reached the log:\n%s", log.String())
			}
		})
	}
}

// TestNodeWithAnotherTokenIsRefused: a node given the wrong token cannot
// join, says why, and leaves the job's keys as they were.
func TestNodeWithAnotherTokenIsRefused(t *testing.T) {
	t.Parallel()
	token, _ := rendezvous.NewToken()
	cfg := Config{Shape: shape(t.Name(), 2, 2, 1), Token: token}
	as := mustAgents(t, 2, cfg)
	rounds := nextAll(t, as, 1)
	other, _ := rendezvous.NewToken()
	cfg.Token, cfg.NodeRank = other, -1
	a, err := newAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = a.r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
	if !errors.Is(err, rendezvous.ErrShapeMismatch) || !strings.Contains(err.Error(), "token") {
		t.Fatalf("Next with another token = %v; want a shape mismatch that names the token", err)
	}
	errs := make(chan error, 2)
	for i, a := range as {
		go func() { errs <- a.r.Succeed(ctx, rounds[i]) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("the job did not complete after a node with another token tried to join: %v", err)
		}
	}
}

// TestRecordsOutOfRangeAreRefused checks the range checks on records that
// carry a valid MAC (a buggy agent of this job).
func TestRecordsOutOfRangeAreRefused(t *testing.T) {
	sh := Shape{RunID: "x", MinNodes: 1, MaxNodes: 4, MaxRestarts: 3}
	good := `{"round":1,"size":2,"world_size":4,"master_addr":"10.0.0.1","master_port":29500,"restarts":0}`
	cases := []struct{ name, rec, want string }{
		{"good", good, ""},
		{"round", strings.Replace(good, `"round":1`, `"round":2`, 1), "under the key"},
		{"negative size", strings.Replace(good, `"size":2`, `"size":-1`, 1), "nodes"},
		{"world size", strings.Replace(good, `"world_size":4`, `"world_size":-9223372036854775808`, 1), "world size"},
		{"empty address", strings.Replace(good, `10.0.0.1`, ``, 1), "address"},
		{"address with a space", strings.Replace(good, `10.0.0.1`, `a b`, 1), "character"},
		{"port -1", strings.Replace(good, `29500`, `-1`, 1), "port"},
		{"restarts", strings.Replace(good, `"restarts":0`, `"restarts":9`, 1), "restarts"},
		{"arrivals", strings.Replace(good, `"restarts":0`, `"restarts":0,"arrivals":[[5,3]]`, 1), "arrival"},
	}
	// wrap puts a record's data in the envelope of kind.
	wrap := func(kind recordKind, data string) []byte {
		return []byte(`{"v":1,"kind":"` + string(kind) + `","data":` + data + `}`)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseRound(wrap(kindClosed, tc.rec), 1, sh)
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseRound = %v; want %q", err, tc.want)
			}
		})
	}
	nodes := []struct{ name, rec, want string }{
		{"good", `{"id":"n","addr":"h","master_port":1,"nproc":2,"node_rank":-1,"prev_rank":-1,"prev_round":-1}`, ""},
		{"id", `{"id":"m","addr":"h","master_port":1,"nproc":2,"node_rank":-1,"prev_rank":-1,"prev_round":-1}`, "under the key"},
		{"rank", `{"id":"n","addr":"h","master_port":1,"nproc":2,"node_rank":9223372036854775807,"prev_rank":-1,"prev_round":-1}`, "node rank"},
		{"nproc", `{"id":"n","addr":"h","master_port":1,"nproc":-2,"node_rank":-1,"prev_rank":-1,"prev_round":-1}`, "workers"},
		{"port", `{"id":"n","addr":"h","master_port":70000,"nproc":2,"node_rank":-1,"prev_rank":-1,"prev_round":-1}`, "port"},
	}
	for _, tc := range nodes {
		t.Run("node "+tc.name, func(t *testing.T) {
			_, err := parseNode(wrap(kindJoin, tc.rec), "n", sh)
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseNode = %v; want %q", err, tc.want)
			}
		})
	}
}

// TestNodesBackInARunningRoundEndIt is the etcd outage: every node's
// lease ended and its workers were stopped, but nobody ended the round;
// when the nodes join again they must form the next round, not wait for
// the old one to end.
func TestNodesBackInARunningRoundEndIt(t *testing.T) {
	t.Parallel()
	token, _ := rendezvous.NewToken()
	as := mustAgents(t, 2, Config{Shape: shape(t.Name(), 2, 2, 1), Token: token})
	first := nextAll(t, as, 1)
	again := nextAll(t, as, 1)
	for i, r := range again {
		if r.Number != first[i].Number+1 || r.RestartCount != 0 {
			t.Errorf("agent %d back in round %d: got round %d with %d restarts; want round %d, no restart spent", i, first[i].Number, r.Number, r.RestartCount, first[i].Number+1)
		}
		if len(r.JobSecret) == 0 || string(r.JobSecret) != string(again[0].JobSecret) || strings.Contains(string(r.JobSecret), string(token)) {
			t.Errorf("agent %d: job secret %q: want one derived secret shared by every node", i, string(r.JobSecret))
		}
	}
}
