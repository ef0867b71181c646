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
	// Processes is how many processes the agents ran in (the store runs
	// in this one): 1 is the store's own.
	Processes int `json:"processes"`
	// StoreCPUSeconds and FloorStoreCPUSeconds are the CPU time the
	// store's process spent inside each clock, and StoreBytesPerAgent
	// what its memory grew by per connected agent: measured when the
	// agents ran in processes of their own (RunSpread). The memory is the
	// live heap after a collection and the goroutines' stacks (etcd's
	// index, each connection's buffers and goroutines), not the process's
	// resident size.
	StoreCPUSeconds      float64 `json:"store_cpu_seconds,omitempty"`
	FloorStoreCPUSeconds float64 `json:"floor_store_cpu_seconds,omitempty"`
	StoreBytesPerAgent   int64   `json:"store_bytes_per_agent,omitempty"`
	// RunningStoreCores is the store's CPU while the job runs after the
	// round (every agent keeping its lease alive, its watch open), in
	// cores, over 10 s (RunSpread).
	RunningStoreCores float64 `json:"running_store_cores,omitempty"`
	// Skipped, when set, says why this count was not measured; Failed,
	// why its measurement did not complete.
	Skipped string `json:"skipped,omitempty"`
	Failed  string `json:"failed,omitempty"`
}

// FilesNeeded estimates the open files a run of n agents holds in this
// one process: each agent's client connection and the store's end of it
// (the store serves a proven connection itself: one descriptor), and
// etcd's own.
func FilesNeeded(n int) uint64 { return uint64(2*n + 1024) }

// storeFilesNeeded is FilesNeeded for the store alone, its agents in
// other processes.
func storeFilesNeeded(n int) uint64 { return uint64(n + 1024) }

// benchToken is the job token of the measured job: a multi-node job on the
// embedded store runs with one, authentication on and every record sealed.
var benchToken = etcdrdzv.Token("gorun-bench-token-0123456789abcdef")

// Run measures n agents against a fresh embedded etcd, set up as for a
// multi-node job: authentication on, each client logged in as the job
// user, every record sealed with the job token; the agents' leases have
// TTL ttl (0: the rendezvous's default).
func Run(ctx context.Context, n int, ttl time.Duration) (Result, error) {
	if n < 1 {
		return Result{}, fmt.Errorf("--agents %d: want at least 1", n)
	}
	if limit := raiseFileLimit(); FilesNeeded(n) > limit {
		return Result{Agents: n, Skipped: fmt.Sprintf("needs about %d open files in this one process (each agent's client, and the store's end of it); the limit here is %d", FilesNeeded(n), limit)}, nil
	}
	server, err := jobstore.StartServer(ctx, jobstore.ServerConfig{Token: benchToken})
	if err != nil {
		return Result{}, err
	}
	defer server.Close()
	clients, login, err := connectClients(ctx, server.Endpoints(), n)
	defer closeClients(clients)
	if err != nil {
		return Result{}, err
	}
	floor, err := measureFloor(ctx, clients)
	if err != nil {
		return Result{}, fmt.Errorf("floor: %w", err)
	}
	full, err := measureRendezvous(ctx, clients, ttl)
	if err != nil {
		return Result{}, fmt.Errorf("rendezvous: %w", err)
	}
	return Result{Agents: n, Processes: 1, Seconds: full.Seconds(), FloorSeconds: floor.Seconds(), LoginSeconds: login.Seconds()}, nil
}

// connectClients logs n clients in to the store at endpoints, all at once
// as a job's nodes do when it starts, and connects each (a first read):
// logging in is timed apart, and neither is part of a measurement. The
// clients are returned even with an error, for closeClients.
func connectClients(ctx context.Context, endpoints []string, n int) ([]*clientv3.Client, time.Duration, error) {
	clients := make([]*clientv3.Client, n)
	jobTLS, err := jobauth.ClientTLS(benchToken)
	if err != nil {
		return clients, 0, err
	}
	loginStart := time.Now()
	g, _ := errgroup.WithContext(ctx)
	g.SetLimit(256)
	for i := range clients {
		g.Go(func() error {
			// As an agent's client: signed in once (etcdrdzv.NewClient).
			c, err := etcdrdzv.NewClient(ctx, clientv3.Config{Endpoints: endpoints, DialTimeout: 30 * time.Second, Logger: zap.NewNop(), TLS: jobTLS,
				Username: etcdrdzv.EtcdUser, Password: benchToken.EtcdPassword()}, benchToken)
			if err != nil {
				return fmt.Errorf("client %d: %w", i, err)
			}
			clients[i] = c
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return clients, 0, err
	}
	login := time.Since(loginStart)
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range clients {
		g.Go(func() error { _, err := c.Get(gctx, etcdrdzv.DefaultPrefix+"/bench-warm-up"); return err })
	}
	if err := g.Wait(); err != nil {
		return clients, 0, fmt.Errorf("connect clients: %w", err)
	}
	return clients, login, nil
}

// closeClients closes the clients connectClients made.
func closeClients(clients []*clientv3.Client) {
	for _, c := range clients {
		if c != nil {
			c.Close()
		}
	}
}

// measureFloor: each client opens a watch on the "go" key, grants a
// lease, puts one key under it, and receives one watch event: the "go"
// key that a coordinator writes once it has seen every put (as a round's
// closer does). The watches are opened inside the clock: an agent has
// none before it starts, and a rendezvous agent opens its own too.
func measureFloor(ctx context.Context, clients []*clientv3.Client) (time.Duration, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	leases := make([]clientv3.LeaseID, len(clients))
	start := time.Now()
	coord := watchFloorKeys(wctx, clients[0])
	g, gctx := errgroup.WithContext(ctx)
	for i, c := range clients {
		g.Go(func() (err error) { leases[i], err = floorAgent(gctx, wctx, c, i); return err })
	}
	g.Go(func() error { return coordinateFloor(gctx, clients[0], coord, len(clients)) })
	err := g.Wait()
	d := time.Since(start)
	if err == nil {
		err = revokeLeases(ctx, clients, leases)
	}
	return d, err
}

// revokeLeases ends the floor's leases, outside both clocks: left, they
// would end with their TTL inside the rendezvous's.
func revokeLeases(ctx context.Context, clients []*clientv3.Client, leases []clientv3.LeaseID) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(256)
	for i, c := range clients {
		if leases[i] != 0 {
			g.Go(func() error {
				return etcdrdzv.RetryOverload(gctx, overloadLimit, func() error { _, err := c.Revoke(gctx, leases[i]); return err })
			})
		}
	}
	return g.Wait()
}

// floorPrefix holds the floor's keys: the job user may write only below
// the job prefix.
const floorPrefix = etcdrdzv.DefaultPrefix + "/bench-floor/"

// floorAgent is agent i's part of the floor: a watch on the "go" key
// (open until wctx ends), a lease, one key put under it, and the go
// key's event. It returns the lease, for revokeLeases.
func floorAgent(ctx, wctx context.Context, c *clientv3.Client, i int) (clientv3.LeaseID, error) {
	watch := c.Watch(wctx, floorPrefix+"go")
	var lease *clientv3.LeaseGrantResponse
	err := etcdrdzv.RetryOverload(ctx, overloadLimit, func() (err error) { lease, err = c.Grant(ctx, floorLeaseTTL); return err })
	if err != nil {
		return 0, err
	}
	err = etcdrdzv.RetryOverload(ctx, overloadLimit, func() error {
		_, err := c.Put(ctx, floorPrefix+"keys/"+strconv.Itoa(i), "x", clientv3.WithLease(lease.ID))
		return err
	})
	if err != nil {
		return lease.ID, err
	}
	return lease.ID, waitEvent(ctx, watch)
}

// overloadLimit is how long a floor agent asks again a call etcd refuses
// for too many requests, as an agent does (etcdrdzv.RetryOverload): a
// floor that gave up there would measure nothing.
const overloadLimit = time.Minute

// floorLeaseTTL is the floor's leases' TTL, in seconds: long enough for
// the slowest floor here (16,384 agents, their puts refused for too many
// requests and tried again); the floor revokes them after its clock.
const floorLeaseTTL = 120

// watchFloorKeys is the floor coordinator's watch of the agents' keys.
func watchFloorKeys(wctx context.Context, c *clientv3.Client) clientv3.WatchChan {
	return c.Watch(wctx, floorPrefix+"keys/", clientv3.WithPrefix())
}

// coordinateFloor waits for n agents' keys on coord, then writes the go
// key: as a round's closer counts the joined nodes and closes it.
func coordinateFloor(ctx context.Context, c *clientv3.Client, coord clientv3.WatchChan, n int) error {
	seen := 0
	for seen < n {
		select {
		case wr, ok := <-coord:
			if !ok || wr.Err() != nil {
				return errors.New("coordinator watch ended")
			}
			seen += len(wr.Events)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	_, err := c.Put(ctx, floorPrefix+"go", "1")
	return err
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
func measureRendezvous(ctx context.Context, clients []*clientv3.Client, ttl time.Duration) (time.Duration, error) {
	n := len(clients)
	log := benchLog()
	rdzvs := make([]*etcdrdzv.Rendezvous, n)
	var mu sync.Mutex
	ranks := map[int]bool{}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for i, c := range clients {
		g.Go(func() error {
			r, rank, err := rendezvousAgent(gctx, c, n, ttl, log)
			rdzvs[i] = r
			if err != nil {
				return err
			}
			mu.Lock()
			ranks[rank] = true
			mu.Unlock()
			return nil
		})
	}
	err := g.Wait()
	d := time.Since(start)
	closeRendezvous(rdzvs)
	if err == nil && len(ranks) != n {
		err = fmt.Errorf("%d agents got %d distinct group ranks", n, len(ranks))
	}
	return d, err
}

// rendezvousAgent is one agent of a job of exactly n nodes: it opens its
// rendezvous (lease, shape) and joins round 0, and returns its group
// rank. The rendezvous is returned even with an error, for Close.
func rendezvousAgent(ctx context.Context, c *clientv3.Client, n int, ttl time.Duration, log logrus.FieldLogger) (*etcdrdzv.Rendezvous, int, error) {
	shape := etcdrdzv.Shape{RunID: "bench", MinNodes: n, MaxNodes: n}
	r, err := etcdrdzv.New(ctx, c, etcdrdzv.Config{Shape: shape, NodeRank: -1, Addr: "127.0.0.1", Log: log, Token: benchToken, LeaseTTL: ttl})
	if err != nil {
		return nil, 0, err
	}
	round, err := r.Next(ctx, rendezvous.Node{LocalWorldSize: 8, Role: "default"})
	if err != nil {
		return r, 0, err
	}
	return r, round.GroupRank, nil
}

// closeRendezvous closes the agents' rendezvous (leaving the job).
func closeRendezvous(rdzvs []*etcdrdzv.Rendezvous) {
	for _, r := range rdzvs {
		if r != nil {
			r.Close(context.Background())
		}
	}
}

// benchLog is the agents' log: silent, unless GORUN_BENCH_DEBUG is set.
func benchLog() logrus.FieldLogger {
	log := logrus.New()
	log.SetOutput(io.Discard)
	if os.Getenv("GORUN_BENCH_DEBUG") != "" {
		log.SetOutput(os.Stderr)
	}
	return log
}

// FileLimit raises this process's limit on open files as far as it may
// go, and returns it.
func FileLimit() uint64 { return raiseFileLimit() }

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
