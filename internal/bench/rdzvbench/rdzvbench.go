// Package rdzvbench measures the etcd rendezvous: N agents, each with its
// own etcd client, through the real protocol against an embedded etcd,
// compared with the floor of the same N clients doing one leased put and
// receiving one watch event each, measured in the same run. It is apart
// from package bench so that only gorun-etcd links etcd.
package rdzvbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/gorun-dev/gorun/rendezvous"
	etcdrdzv "github.com/gorun-dev/gorun/rendezvous/etcd"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// Result is one measurement, as `gorun bench rendezvous --format json`
// prints it.
type Result struct {
	Agents       int     `json:"agents"`
	Seconds      float64 `json:"seconds"`
	FloorSeconds float64 `json:"floor_seconds"`
	// LoginSeconds is the time for every client to log in to the store at
	// once (outside both clocks): what the store's host spends on the
	// job's nodes before the first can join.
	LoginSeconds float64 `json:"login_seconds"`
	// Skipped, when set, says why this count was not measured.
	Skipped string `json:"skipped,omitempty"`
}

// FilesNeeded estimates the open files a run of n agents holds in this
// one process: each agent's client connection, the store's three
// descriptors for it (the connection it accepts and both ends of the
// socket it forwards to), the floor's watches, and etcd's own. Measured:
// 4096 agents ran out of 20,000.
func FilesNeeded(n int) uint64 { return uint64(5*n + 1024) }

// benchToken is the job token of the measured job: a multi-node job on the
// embedded store runs with one, authentication on and every record sealed.
var benchToken = etcdrdzv.Token("gorun-bench-token-0123456789abcdef")

// Run measures n agents against a fresh embedded etcd, set up as for a
// multi-node job: authentication on, each client logged in as the job
// user, every record sealed with the job token.
func Run(ctx context.Context, n int) (Result, error) {
	if n < 1 {
		return Result{}, fmt.Errorf("--agents %d: want at least 1", n)
	}
	if limit := raiseFileLimit(); FilesNeeded(n) > limit {
		return Result{Agents: n, Skipped: fmt.Sprintf("needs about %d open files in this one process (each agent's client, and the store's 3 descriptors for it); the limit here is %d", FilesNeeded(n), limit)}, nil
	}
	server, err := jobstore.StartServer(ctx, jobstore.ServerConfig{Token: benchToken})
	if err != nil {
		return Result{}, err
	}
	defer server.Close()
	clients := make([]*clientv3.Client, n)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	// Every client logs in at once, as a job's nodes do when it starts;
	// logging in is timed apart and is not part of either measurement.
	jobTLS, err := jobauth.ClientTLS(benchToken)
	if err != nil {
		return Result{}, err
	}
	loginStart := time.Now()
	g, _ := errgroup.WithContext(ctx)
	g.SetLimit(256)
	for i := range clients {
		g.Go(func() error {
			// As an agent's client: signed in once (etcdrdzv.NewClient).
			c, err := etcdrdzv.NewClient(ctx, clientv3.Config{Endpoints: server.Endpoints(), DialTimeout: 30 * time.Second, Logger: zap.NewNop(), TLS: jobTLS,
				Username: etcdrdzv.EtcdUser, Password: benchToken.EtcdPassword()}, benchToken)
			if err != nil {
				return fmt.Errorf("client %d: %w", i, err)
			}
			clients[i] = c
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Result{}, err
	}
	login := time.Since(loginStart)
	// Connect every client before the clock starts: dialing is not part of
	// either measurement.
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range clients {
		g.Go(func() error { _, err := c.Get(gctx, etcdrdzv.DefaultPrefix+"/bench-warm-up"); return err })
	}
	if err := g.Wait(); err != nil {
		return Result{}, fmt.Errorf("connect clients: %w", err)
	}
	floor, err := measureFloor(ctx, clients)
	if err != nil {
		return Result{}, fmt.Errorf("floor: %w", err)
	}
	full, err := measureRendezvous(ctx, clients)
	if err != nil {
		return Result{}, fmt.Errorf("rendezvous: %w", err)
	}
	return Result{Agents: n, Seconds: full.Seconds(), FloorSeconds: floor.Seconds(), LoginSeconds: login.Seconds()}, nil
}

// measureFloor: each client opens a watch on the "go" key, grants a
// lease, puts one key under it, and receives one watch event: the "go"
// key that a coordinator writes once it has seen every put (as a round's
// closer does). The watches are opened inside the clock: an agent has
// none before it starts, and a rendezvous agent opens its own too.
func measureFloor(ctx context.Context, clients []*clientv3.Client) (time.Duration, error) {
	const prefix = etcdrdzv.DefaultPrefix + "/bench-floor/" // the job user may write only below the job prefix
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	coord := clients[0].Watch(wctx, prefix+"keys/", clientv3.WithPrefix())
	g, gctx := errgroup.WithContext(ctx)
	for i, c := range clients {
		g.Go(func() error {
			watch := c.Watch(wctx, prefix+"go")
			lease, err := c.Grant(gctx, 10)
			if err != nil {
				return err
			}
			if _, err := c.Put(gctx, prefix+"keys/"+strconv.Itoa(i), "x", clientv3.WithLease(lease.ID)); err != nil {
				return err
			}
			return waitEvent(gctx, watch)
		})
	}
	g.Go(func() error {
		seen := 0
		for seen < len(clients) {
			select {
			case wr, ok := <-coord:
				if !ok || wr.Err() != nil {
					return errors.New("coordinator watch ended")
				}
				seen += len(wr.Events)
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		_, err := clients[0].Put(gctx, prefix+"go", "1")
		return err
	})
	err := g.Wait()
	return time.Since(start), err
}

func waitEvent(ctx context.Context, w clientv3.WatchChan) error {
	select {
	case wr, ok := <-w:
		if !ok || wr.Err() != nil {
			return errors.New("watch ended")
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// measureRendezvous: every agent opens its rendezvous (lease, shape) and
// joins round 0 of a job of exactly n nodes, until every agent holds it.
func measureRendezvous(ctx context.Context, clients []*clientv3.Client) (time.Duration, error) {
	n := len(clients)
	log := logrus.New()
	log.SetOutput(io.Discard)
	if os.Getenv("GORUN_BENCH_DEBUG") != "" {
		log.SetOutput(os.Stderr)
	}
	shape := etcdrdzv.Shape{RunID: "bench", MinNodes: n, MaxNodes: n}
	rdzvs := make([]*etcdrdzv.Rendezvous, n)
	var mu sync.Mutex
	ranks := map[int]bool{}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for i, c := range clients {
		g.Go(func() error {
			r, err := etcdrdzv.New(gctx, c, etcdrdzv.Config{Shape: shape, NodeRank: -1, Addr: "127.0.0.1", Log: log, Token: benchToken})
			if err != nil {
				return err
			}
			rdzvs[i] = r
			round, err := r.Next(gctx, rendezvous.Node{LocalWorldSize: 8, Role: "default"})
			if err != nil {
				return err
			}
			mu.Lock()
			ranks[round.GroupRank] = true
			mu.Unlock()
			return nil
		})
	}
	err := g.Wait()
	d := time.Since(start)
	for _, r := range rdzvs {
		if r != nil {
			r.Close(context.Background())
		}
	}
	if err == nil && len(ranks) != n {
		err = fmt.Errorf("%d agents got %d distinct group ranks", n, len(ranks))
	}
	return d, err
}

// raiseFileLimit lifts the soft limit on open files to the hard one: every
// agent's client holds a socket, and so does the server's end.
// raiseFileLimit raises the limit on open files as far as it may go
// (root may raise the hard limit too) and returns it.
func raiseFileLimit() uint64 {
	const want = 1 << 20
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Max < want &&
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}) == nil {
		return want
	}
	return jobstore.RaiseFileLimit()
}
