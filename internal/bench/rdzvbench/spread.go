package rdzvbench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"

	etcdrdzv "github.com/gorun-dev/gorun/rendezvous/etcd"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// The benchmark past one process: the store runs in this process, as on
// a job's first node, and the agents in child processes, each with its
// own descriptors (AgentsArgs). A child logs its clients in, says it is
// ready, then runs each phase it is told on its standard input: "floor",
// "tidy" (the floor's leases revoked, outside both clocks), "rendezvous",
// and "exit". It answers each with one JSON line
// (agentReply) on its standard output. Both clocks run in this process,
// from the command sent to every child to the last child's answer.

// AgentsPerProcess is how many agents one child process runs by default:
// its clients' descriptors, with room to spare under a limit of 20,000.
const AgentsPerProcess = 4096

// AgentsConfig is one child process's share of the agents.
type AgentsConfig struct {
	// Endpoint is the store's client address.
	Endpoint string
	// Agents is the job's size; First and Count the child's agents,
	// numbered from 0.
	Agents, First, Count int
	// LeaseTTL is the agents' lease TTL (0: the rendezvous's default).
	LeaseTTL time.Duration
}

// AgentsArgs are the arguments that make the program (gorun-etcd) a
// child of RunSpread: `bench rendezvous` with the hidden agents flags.
func AgentsArgs(cfg AgentsConfig) []string {
	return []string{"bench", "rendezvous", "--agents", strconv.Itoa(cfg.Agents), "--agents-at", cfg.Endpoint,
		"--agents-from", strconv.Itoa(cfg.First), "--agents-count", strconv.Itoa(cfg.Count), "--lease-ttl", cfg.LeaseTTL.String()}
}

// agentReply is a child's answer to a phase.
type agentReply struct {
	// Phase is "ready" (logged in and connected), "floor", "tidy" or
	// "rendezvous".
	Phase string `json:"phase"`
	// Ranks are the group ranks the child's agents got (rendezvous).
	Ranks []int `json:"ranks,omitempty"`
	// Error, when set, is why the phase failed; the child then exits.
	Error string `json:"error,omitempty"`
}

// ServeAgents is the child's side: it connects cfg's agents to the store,
// then runs the phases read from in, answering on out, until "exit" or
// the end of in.
func ServeAgents(ctx context.Context, cfg AgentsConfig, in io.Reader, out io.Writer) error {
	raiseFileLimit()
	enc := json.NewEncoder(out)
	fail := func(phase string, err error) error {
		_ = enc.Encode(agentReply{Phase: phase, Error: err.Error()})
		return err
	}
	clients, _, err := connectClients(ctx, []string{cfg.Endpoint}, cfg.Count)
	defer closeClients(clients)
	if err != nil {
		return fail("ready", err)
	}
	if err := enc.Encode(agentReply{Phase: "ready"}); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rdzvs := make([]*etcdrdzv.Rendezvous, len(clients))
	defer closeRendezvous(rdzvs)
	leases := make([]clientv3.LeaseID, len(clients))
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		phase := lines.Text()
		g, gctx := errgroup.WithContext(ctx)
		reply := agentReply{Phase: phase}
		switch phase {
		case "floor":
			for i, c := range clients {
				g.Go(func() (err error) { leases[i], err = floorAgent(gctx, wctx, c, cfg.First+i); return err })
			}
		case "tidy":
			g.Go(func() error { return revokeLeases(gctx, clients, leases) })
		case "rendezvous":
			reply.Ranks = make([]int, len(clients))
			log := benchLog()
			for i, c := range clients {
				g.Go(func() error {
					var err error
					rdzvs[i], reply.Ranks[i], err = rendezvousAgent(gctx, c, cfg.Agents, cfg.LeaseTTL, log)
					return err
				})
			}
		case "exit":
			return nil
		default:
			return fail(phase, fmt.Errorf("unknown phase %q: want floor, tidy, rendezvous or exit", phase))
		}
		if err := g.Wait(); err != nil {
			return fail(phase, err)
		}
		if err := enc.Encode(reply); err != nil {
			return err
		}
	}
	return lines.Err()
}

// RunSpread measures n agents spread over procs child processes of
// binary (gorun-etcd), against a store in this process, with the floor of
// the same clients in the same run. It also measures what the store's
// process spends: its CPU inside each clock, its memory per agent, and
// its CPU while the job runs after the round.
func RunSpread(ctx context.Context, binary string, n, procs int, ttl time.Duration) (Result, error) {
	if n < 1 || procs < 1 || procs > n {
		return Result{}, fmt.Errorf("--agents %d over %d processes: want at least 1 agent per process", n, procs)
	}
	if limit := raiseFileLimit(); storeFilesNeeded(n) > limit {
		return Result{Agents: n, Processes: procs, Skipped: fmt.Sprintf("the store needs about %d open files (one per agent, and etcd's own); the limit of its process here is %d, and only a privileged process may raise it", storeFilesNeeded(n), limit)}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	server, err := jobstore.StartServer(ctx, jobstore.ServerConfig{Token: benchToken})
	if err != nil {
		return Result{}, err
	}
	defer server.Close()
	before := liveHeap()
	loginStart := time.Now()
	kids, err := startAgents(ctx, binary, AgentsConfig{Endpoint: server.Endpoints()[0], Agents: n, LeaseTTL: ttl}, procs)
	defer kids.stop()
	if err != nil {
		return Result{}, err
	}
	if _, err := kids.phase(""); err != nil { // every child's "ready"
		return Result{}, err
	}
	login := time.Since(loginStart)
	perAgent := (liveHeap() - before) / int64(n)
	coordClients, _, err := connectClients(ctx, server.Endpoints(), 1)
	defer closeClients(coordClients)
	if err != nil {
		return Result{}, err
	}
	coord := coordClients[0]

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	cpu0, start := processCPU(), time.Now()
	keys := watchFloorKeys(wctx, coord)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return coordinateFloor(gctx, coord, keys, n) })
	g.Go(func() error { _, err := kids.phase("floor"); return err })
	if err := g.Wait(); err != nil {
		return Result{}, fmt.Errorf("floor: %w", err)
	}
	floor, floorCPU := time.Since(start), processCPU()-cpu0
	if _, err := kids.phase("tidy"); err != nil {
		return Result{}, fmt.Errorf("floor: %w", err)
	}

	cpu0, start = processCPU(), time.Now()
	replies, err := kids.phase("rendezvous")
	if err != nil {
		// The floor's figures stand: the row says what the rendezvous met.
		return Result{Agents: n, Processes: procs + 1, FloorSeconds: floor.Seconds(), LoginSeconds: login.Seconds(),
			FloorStoreCPUSeconds: floorCPU.Seconds(), StoreBytesPerAgent: perAgent, Failed: "rendezvous: " + err.Error()}, nil
	}
	full, fullCPU := time.Since(start), processCPU()-cpu0
	ranks := map[int]bool{}
	for _, r := range replies {
		for _, g := range r.Ranks {
			ranks[g] = true
		}
	}
	if len(ranks) != n {
		return Result{}, fmt.Errorf("rendezvous: %d agents got %d distinct group ranks", n, len(ranks))
	}
	// The job runs: every agent keeps its lease alive and its watch open.
	cpu0 = processCPU()
	if err := ctxtime.Sleep(ctx, keepAliveWindow); err != nil {
		return Result{}, err
	}
	idle := processCPU() - cpu0
	return Result{Agents: n, Processes: procs + 1, Seconds: full.Seconds(), FloorSeconds: floor.Seconds(), LoginSeconds: login.Seconds(),
		StoreCPUSeconds: fullCPU.Seconds(), FloorStoreCPUSeconds: floorCPU.Seconds(), StoreBytesPerAgent: perAgent,
		RunningStoreCores: idle.Seconds() / keepAliveWindow.Seconds()}, nil
}

// keepAliveWindow is how long the store's CPU is measured while the job
// runs, after the round.
const keepAliveWindow = 10 * time.Second

// agentProcs are RunSpread's children.
type agentProcs struct {
	cmds []*exec.Cmd
	ins  []io.WriteCloser
	outs []*json.Decoder
}

// startAgents starts procs children sharing job's agents.
func startAgents(ctx context.Context, binary string, job AgentsConfig, procs int) (*agentProcs, error) {
	k := &agentProcs{}
	for p := range procs {
		share := job
		share.First, share.Count = p*job.Agents/procs, (p+1)*job.Agents/procs-p*job.Agents/procs
		cmd := exec.CommandContext(ctx, binary, AgentsArgs(share)...)
		// A child ends with its standard input: when this process ends.
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return k, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return k, err
		}
		if err := cmd.Start(); err != nil {
			return k, fmt.Errorf("start agent process %d: %w", p, err)
		}
		k.cmds, k.ins, k.outs = append(k.cmds, cmd), append(k.ins, in), append(k.outs, json.NewDecoder(out))
	}
	return k, nil
}

// phase tells every child to run phase ("" only waits for the next
// answer) and waits for every answer.
func (k *agentProcs) phase(phase string) ([]agentReply, error) {
	if phase != "" {
		for p, in := range k.ins {
			if _, err := io.WriteString(in, phase+"\n"); err != nil {
				return nil, fmt.Errorf("agent process %d: %w", p, err)
			}
		}
	}
	replies := make([]agentReply, len(k.outs))
	g := errgroup.Group{}
	var once sync.Once
	for p, out := range k.outs {
		g.Go(func() error {
			err := out.Decode(&replies[p])
			switch {
			case err != nil:
				err = fmt.Errorf("agent process %d ended: %w", p, err)
			case replies[p].Error != "":
				err = fmt.Errorf("agent process %d: %s", p, replies[p].Error)
			}
			if err != nil {
				// The others' agents would wait for this one's for ever
				// (a job of n nodes never forms without them): end them.
				once.Do(k.kill)
			}
			return err
		})
	}
	return replies, g.Wait()
}

// kill ends every child at once.
func (k *agentProcs) kill() {
	for _, cmd := range k.cmds {
		_ = cmd.Process.Kill()
	}
}

// stop tells the children to exit and waits for them; a child that does
// not within a minute is killed.
func (k *agentProcs) stop() {
	for _, in := range k.ins {
		_, _ = io.WriteString(in, "exit\n")
		in.Close()
	}
	for _, cmd := range k.cmds {
		t := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
		_ = cmd.Wait()
		t.Stop()
	}
}

// processCPU is the CPU time this process has spent, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// liveHeap is what this process's heap holds after a collection, with
// its goroutines' stacks: the store's memory, where the resident size
// also counts what earlier counts freed and the runtime kept.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}

// vmRSS reads the resident memory, in KiB, of a /proc/PID/status.
func vmRSS(status string) (int64, bool) {
	for line := range strings.SplitSeq(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb, err == nil
		}
	}
	return 0, false
}
