package rdzvbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/internal/sys/proc"
	etcdrdzv "github.com/gorun-dev/gorun/rendezvous/etcd"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
)

// LeaseResult is one measurement of `gorun bench leases`: what keeping
// the leases of nodes agents alive at a lease TTL costs the store's
// process, against how long a silent node takes to be dropped.
type LeaseResult struct {
	Nodes      int     `json:"nodes"`
	TTLSeconds float64 `json:"ttl_seconds"`
	// KeepAlivesPerSecond is what the store receives: a client renews
	// each lease every TTL/3 (etcd's client).
	KeepAlivesPerSecond float64 `json:"keepalives_per_second"`
	// StoreCPU is the store process's CPU time over the window, as a
	// fraction of one core.
	StoreCPU float64 `json:"store_cpu"`
	// DropSeconds is the time from a node going silent (its keep-alives
	// stopped) to its key's deletion reaching a watcher: how fast the
	// rendezvous learns of a lost node.
	DropSeconds float64 `json:"drop_seconds"`
}

// leaseClients is how many etcd clients carry the leases: a node's agent
// keeps one lease on its own client; the store's work is per lease
// renewed, so fewer clients, each renewing many leases on one stream,
// load it alike without a process's worth of descriptors per node.
const leaseClients = 64

// storeLine is the line a `gorun store` prints once it serves.
var storeLine = regexp.MustCompile(`serving at \[([^\]]+)\]`)

// RunLeases measures nodes leases of TTL ttl kept alive against a `gorun
// store` (binary, run as a separate process so that its CPU is its own),
// over window.
func RunLeases(ctx context.Context, binary string, nodes int, ttl, window time.Duration) (LeaseResult, error) {
	if nodes < 1 || ttl < time.Second {
		return LeaseResult{}, fmt.Errorf("nodes %d, TTL %v: want at least 1 node and 1 s", nodes, ttl)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	store, endpoint, stopStore, err := startLeaseStore(binary)
	if err != nil {
		return LeaseResult{}, err
	}
	defer stopStore()
	jobTLS, err := jobauth.ClientTLS(benchToken)
	if err != nil {
		return LeaseResult{}, err
	}
	clients := make([]*clientv3.Client, min(leaseClients, nodes))
	for i := range clients {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 30 * time.Second, Logger: zap.NewNop(), TLS: jobTLS,
			Username: etcdrdzv.EtcdUser, Password: benchToken.EtcdPassword()})
		if err != nil {
			return LeaseResult{}, err
		}
		defer c.Close()
		clients[i] = c
	}
	secs := int64(ttl / time.Second)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range nodes {
		c := clients[i%len(clients)]
		g, err := c.Grant(ctx, secs)
		if err != nil {
			return LeaseResult{}, fmt.Errorf("grant lease %d: %w", i, err)
		}
		ch, err := c.KeepAlive(ctx, g.ID)
		if err != nil {
			return LeaseResult{}, err
		}
		wg.Go(func() {
			for range ch {
			}
		})
	}
	// The keep-alives settle into their rhythm, then the window.
	if err := ctxtime.Sleep(ctx, ttl); err != nil {
		return LeaseResult{}, err
	}
	before, err := cpuTime(store.Pid)
	if err != nil {
		return LeaseResult{}, err
	}
	start := time.Now()
	if err := ctxtime.Sleep(ctx, window); err != nil {
		return LeaseResult{}, err
	}
	after, err := cpuTime(store.Pid)
	if err != nil {
		return LeaseResult{}, err
	}
	res := LeaseResult{Nodes: nodes, TTLSeconds: ttl.Seconds(), KeepAlivesPerSecond: float64(nodes) * 3 / ttl.Seconds(),
		StoreCPU: (after - before).Seconds() / time.Since(start).Seconds()}
	if res.DropSeconds, err = measureDrop(ctx, clients[0], secs); err != nil {
		return LeaseResult{}, err
	}
	return res, nil
}

// startLeaseStore starts `binary store` with the benchmark's token and
// returns it, its client address and the function that stops it (its
// standard input closes) and waits for it. It dies with this process.
func startLeaseStore(binary string) (store *proc.Process, endpoint string, stop func(), err error) {
	inR, stdin, err := os.Pipe()
	if err != nil {
		return nil, "", nil, err
	}
	out, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		stdin.Close()
		return nil, "", nil, err
	}
	store, started := proc.Start(func() *exec.Cmd {
		cmd := exec.Command(binary, "store", "--listen", "127.0.0.1:0", "--log-level", "panic", "--token-stdin", "--stop-on-stdin-close")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
		return cmd
	}, proc.Options{})
	err = <-started
	inR.Close() // the store's ends
	outW.Close()
	if err != nil {
		stdin.Close()
		out.Close()
		return nil, "", nil, err
	}
	stop = func() {
		stdin.Close()
		<-store.Done()
		out.Close()
	}
	if _, err := io.WriteString(stdin, string(benchToken)+"\n"); err != nil {
		stop()
		return nil, "", nil, err
	}
	lines := bufio.NewScanner(out)
	for endpoint == "" && lines.Scan() {
		if m := storeLine.FindStringSubmatch(lines.Text()); m != nil {
			endpoint = m[1]
		}
	}
	if endpoint == "" {
		stop()
		return nil, "", nil, fmt.Errorf("the store did not start: %v", lines.Err())
	}
	// The rest of its output, until it ends (stop closes out).
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return store, endpoint, stop, nil
}

// measureDrop keeps one more lease with a key alive, then stops renewing
// it and times the key's deletion as a watcher sees it.
func measureDrop(ctx context.Context, c *clientv3.Client, ttl int64) (float64, error) {
	g, err := c.Grant(ctx, ttl)
	if err != nil {
		return 0, err
	}
	key := etcdrdzv.DefaultPrefix + "/bench-leases/silent"
	put, err := c.Put(ctx, key, "x", clientv3.WithLease(g.ID))
	if err != nil {
		return 0, err
	}
	w := c.Watch(ctx, key, clientv3.WithRev(put.Header.Revision+1), clientv3.WithFilterPut())
	kctx, stop := context.WithCancel(ctx)
	ch, err := c.KeepAlive(kctx, g.ID)
	if err != nil {
		stop()
		return 0, err
	}
	// A renewal, then silence: the node is lost right after it.
	<-ch
	<-ch
	silent := time.Now()
	stop()
	for range ch {
	}
	for wr := range w {
		if err := wr.Err(); err != nil {
			return 0, err
		}
		if len(wr.Events) > 0 {
			return time.Since(silent).Seconds(), nil
		}
	}
	return 0, ctx.Err()
}

// cpuTime is the user and system CPU time of process pid.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the whole line (12th and 13th here).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q %q", pid, f[11], f[12])
	}
	// Linux counts in USER_HZ, 100 a second on every architecture it runs.
	return time.Duration(u+st) * 10 * time.Millisecond, nil
}
