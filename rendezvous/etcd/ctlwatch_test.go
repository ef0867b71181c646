package etcd

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
)

// TestWatchGoesOnWithTheJoinsWatch: the round's Watch takes the control
// watch of the join: from Next to the round's end an agent's client opens
// one watch stream, not one for the join and another for the round (every
// node closed and opened one as the round closed). The round's end,
// recorded between Next and Watch, is seen.
func TestWatchGoesOnWithTheJoinsWatch(t *testing.T) {
	t.Parallel()
	var streams, creates atomic.Int32
	count := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if method != "/etcdserverpb.Watch/Watch" || err != nil {
			return s, err
		}
		streams.Add(1)
		return &createCounter{ClientStream: s, creates: &creates}, nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: server.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(count)}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := New(ctx, cli, Config{Shape: shape(t.Name(), 1, 1, 1), NodeRank: -1, Addr: "127.0.0.1", Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	round, err := r.Next(ctx, rendezvous.Node{LocalWorldSize: 1, Role: "default"})
	if err != nil {
		t.Fatal(err)
	}
	r.endRound(ctx, round.Number, "ended between Next and Watch")
	select {
	case ev := <-r.Watch(ctx, round):
		if !strings.Contains(ev.Reason, "ended between Next and Watch") {
			t.Errorf("Watch: %q; want the round's end", ev.Reason)
		}
	case <-ctx.Done():
		t.Fatal("Watch did not see the round's end")
	}
	if n := streams.Load(); n != 1 {
		t.Errorf("watch streams opened from Next to the round's end: %d, want 1", n)
	}
	// The join's control watch and, this node being the closer, its
	// watch of the joins; then the round's watches of its members and of
	// the nodes waiting: no second control watch.
	if n := creates.Load(); n != 4 {
		t.Errorf("watches created from Next to the round's end: %d, want 4", n)
	}
}

// createCounter counts the watches created on a watch stream.
type createCounter struct {
	grpc.ClientStream
	creates *atomic.Int32
}

func (c *createCounter) SendMsg(m any) error {
	if req, ok := m.(*etcdserverpb.WatchRequest); ok && req.GetCreateRequest() != nil {
		c.creates.Add(1)
	}
	return c.ClientStream.SendMsg(m)
}

// TestOldEventsAreNotNews: a watch event at or before the revision of
// what the agent read is not applied again; applied, an older round
// counter would be refused as behind, with an error in the log (a watch
// kept from the join delivers the events of the round's whole run).
func TestOldEventsAreNotNews(t *testing.T) {
	log := &syncBuf{}
	l := logrus.New()
	l.SetOutput(log)
	token, _ := rendezvous.NewToken()
	r := &Rendezvous{cfg: Config{Shape: Shape{RunID: "old-events", MinNodes: 1, MaxNodes: 1, MaxRestarts: 3}, Log: l},
		k: newKeys(DefaultPrefix, "old-events"), g: jobauth.NewGuard(token, l)}
	r.trusted.Store(true)
	roundAt := func(n int, rev int64) *clientv3.Event {
		key := r.k.round()
		return &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: []byte(r.seal(key, kindRoundCounter, n)), ModRevision: rev}}
	}
	cases := []struct {
		name      string
		events    []*clientv3.Event
		wantRound int
	}{
		{"older than the read", []*clientv3.Event{roundAt(3, 8), roundAt(4, 9), roundAt(5, 10)}, 5},
		{"newer than the read", []*clientv3.Event{roundAt(5, 10), roundAt(6, 11)}, 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newControl()
			c.round, c.rev = 5, 10
			r.applyEvents(context.Background(), c, tc.events)
			if c.round != tc.wantRound {
				t.Errorf("round %d, want %d", c.round, tc.wantRound)
			}
			if strings.Contains(log.String(), "refused") {
				t.Errorf("an old event was refused:\n%s", log)
			}
		})
	}
}
