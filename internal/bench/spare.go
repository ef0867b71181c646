package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/rendezvous"
)

// SpareConfig configures `gorun bench spare`: the time from the loss of
// a node to training again, when a hot spare takes its place, against a
// job that shrinks instead. Both jobs run on this machine's loopback
// addresses (127.0.0.1, .2, .3) over the embedded store.
type SpareConfig struct {
	// Gorun is the gorun binary.
	Gorun string
	// Runs is the number of measured losses per case.
	Runs int
	// LeaseTTL and LastCall are the rendezvous settings of both jobs
	// (--rdzv-conf lease_ttl, last_call_timeout).
	LeaseTTL, LastCall time.Duration
	// Notes receives a line per run.
	Notes io.Writer
}

// SpareResult holds the figures.
type SpareResult struct {
	Machine  Machine `json:"machine"`
	LeaseTTL string  `json:"lease_ttl"`
	LastCall string  `json:"last_call_timeout"`
	// Spare: 3 nodes, a layout valid at 2 only: one spare; a member's
	// agent is SIGKILLed and the spare takes its place (2 nodes again).
	Spare Stats `json:"spare"`
	// Shrink: 2 nodes, a layout valid at 1 and 2: a member's agent is
	// SIGKILLed and the job goes on with 1 node.
	Shrink Stats `json:"shrink"`
}

// The plans: the spare's is valid at 2 nodes of 2 workers only (TP2 PP2:
// 6 workers do not split); the shrinking job's at 1 and 2 (TP2).
const (
	sparePlan  = "tensor_model_parallel_size: 2\npipeline_model_parallel_size: 2\nnum_layers: 8\nglobal_batch_size: 32\nmicro_batch_size: 2\n"
	shrinkPlan = "tensor_model_parallel_size: 2\nnum_layers: 8\nglobal_batch_size: 32\nmicro_batch_size: 2\n"
	// spareWorker records its start (round world size, rank) and runs
	// until stopped: its start is training again.
	spareWorker = "#!/bin/sh\ntouch \"$1/up.$WORLD_SIZE.$RANK.$$\"\nwhile :; do sleep 0.05; done\n"
)

// RunSpare measures both cases, alternating run by run.
func RunSpare(ctx context.Context, cfg SpareConfig) (SpareResult, error) {
	res := SpareResult{Machine: Describe(ctx, "-"), LeaseTTL: cfg.LeaseTTL.String(), LastCall: cfg.LastCall.String()}
	var spare, shrink Sample
	for i := range cfg.Runs {
		for _, c := range []struct {
			name  string
			nodes int
			plan  string
			into  *Sample
		}{{"spare", 3, sparePlan, &spare}, {"shrink", 2, shrinkPlan, &shrink}} {
			d, err := lossToTraining(ctx, cfg, c.nodes, c.plan)
			if err != nil {
				return res, fmt.Errorf("%s, run %d: %w", c.name, i+1, err)
			}
			*c.into = append(*c.into, d)
			if cfg.Notes != nil {
				fmt.Fprintf(cfg.Notes, "bench spare: %s run %d: node loss -> training again in %s\n", c.name, i+1, ms(d))
			}
		}
	}
	res.Spare, res.Shrink = spare.Stats(), shrink.Stats()
	return res, nil
}

// lossToTraining runs one job of nodes agents (2 workers each), kills
// node 1's agent once the job trains (and, with 3 nodes, the third waits
// as a spare), and returns the time until every worker of the next round
// has started.
func lossToTraining(ctx context.Context, cfg SpareConfig, nodes int, plan string) (time.Duration, error) {
	dir, err := os.MkdirTemp("", "gorun-bench-spare-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	planFile, script := filepath.Join(dir, "plan.yaml"), filepath.Join(dir, "worker.sh")
	if err := errors.Join(os.WriteFile(planFile, []byte(plan), 0o600), os.WriteFile(script, []byte(spareWorker), 0o700)); err != nil {
		return 0, err
	}
	ups := filepath.Join(dir, "ups")
	if err := os.Mkdir(ups, 0o700); err != nil {
		return 0, err
	}
	port, err := freeLoopbackPort()
	if err != nil {
		return 0, err
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return 0, err
	}
	env := append(os.Environ(), rendezvous.TokenEnv+"="+hex.EncodeToString(tok))
	agents := make([]*spareAgent, 0, nodes)
	defer func() {
		for _, a := range agents {
			a.stop()
		}
	}()
	start := func(i int) (*spareAgent, error) {
		nnodes := "--nnodes=1:2"
		if nodes == 3 {
			nnodes = "--nnodes=2:3"
		}
		args := []string{nnodes, "--nproc-per-node=2", "--plan", planFile,
			"--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:" + strconv.Itoa(port), "--rdzv-id=bench-spare",
			"--rdzv-conf=lease_ttl=" + seconds(cfg.LeaseTTL) + ",last_call_timeout=" + seconds(cfg.LastCall),
			"--local-addr=127.0.0." + strconv.Itoa(i+1), "--preempt-grace=0", "--no-python", script, ups}
		a, err := startSpareAgent(ctx, cfg.Gorun, env, args)
		if err == nil {
			agents = append(agents, a)
		}
		return a, err
	}
	for i := range 2 {
		if _, err := start(i); err != nil {
			return 0, err
		}
	}
	if err := waitUps(ctx, ups, 4, time.Time{}, 60*time.Second); err != nil {
		return 0, fmt.Errorf("the first round: %w", err)
	}
	if nodes == 3 {
		a, err := start(2)
		if err != nil {
			return 0, err
		}
		if err := a.waitLog(ctx, "hot spare", 60*time.Second); err != nil {
			return 0, fmt.Errorf("the third node as a spare: %w", err)
		}
	}
	killed := time.Now()
	if err := agents[1].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, err
	}
	want := 4
	if nodes == 2 {
		want = 2 // the survivor alone
	}
	if err := waitUps(ctx, ups, want, killed, 120*time.Second); err != nil {
		return 0, fmt.Errorf("the round after the loss: %w", err)
	}
	return time.Since(killed), nil
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// waitUps waits until want workers started after since, polling every
// 5 ms: the resolution of the figure.
func waitUps(ctx context.Context, dir string, want int, since time.Time, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		n := 0
		for _, e := range entries {
			if info, err := e.Info(); err == nil && info.ModTime().After(since) {
				n++
			}
		}
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d workers started within %v", n, want, limit)
		}
		if err := ctxtime.Sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
}

// spareAgent is one gorun agent of the benchmark, in its own process
// group, its stderr kept.
type spareAgent struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
}

func startSpareAgent(ctx context.Context, gorun string, env, args []string) (*spareAgent, error) {
	a := &spareAgent{cmd: exec.Command(gorun, args...), done: make(chan struct{})}
	a.cmd.Env = env
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	a.cmd.Stdout = io.Discard
	a.cmd.Stderr = writerFunc(func(p []byte) (int, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.log.Write(p)
	})
	if err := a.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = a.cmd.Wait()
		close(a.done)
	}()
	return a, nil
}

// waitLog waits for text in the agent's log.
func (a *spareAgent) waitLog(ctx context.Context, text string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		a.mu.Lock()
		found, tail := strings.Contains(a.log.String(), text), a.log.String()
		a.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-a.done:
			return fmt.Errorf("the agent exited before logging %q:\n%s", text, tail)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %q within %v:\n%s", text, limit, tail)
		}
	}
}

// stop ends the agent (SIGINT: stop at once; SIGKILL after 10 s).
func (a *spareAgent) stop() {
	_ = a.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// freeLoopbackPort returns a port free on 127.0.0.1, and the next one
// (the embedded store's peer port) free too.
func freeLoopbackPort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+1)); err == nil {
			l2.Close()
			return port, nil
		}
	}
	return 0, errors.New("no two free ports in a row on 127.0.0.1")
}

// Markdown renders the result for docs/benchmarks.md.
func (r SpareResult) Markdown(when time.Time, runs int) string {
	var b strings.Builder
	b.WriteString("## Node loss: hot spare vs shrinking (`gorun bench spare`)\n\n")
	fmt.Fprintf(&b, "Measured %s, %d losses per case, the cases alternating run by run.\n\n", when.UTC().Format("2006-01-02 15:04 MST"), runs)
	fmt.Fprintf(&b, "- Machine: %s\n", r.Machine)
	fmt.Fprintf(&b, "- Both jobs: 2 shell workers per node over the embedded store on 127.0.0.1-3, `--plan`, `--rdzv-conf lease_ttl=%s,last_call_timeout=%s`; node 1's agent is SIGKILLed while the job trains; the figure runs from the kill to every worker of the next round started.\n", r.LeaseTTL, r.LastCall)
	b.WriteString("- Spare: 3 nodes, a layout (TP2 PP2) valid at 2 nodes only, so the third waits as a hot spare and takes the lost node's place: the job keeps its size and layout.\n")
	b.WriteString("- Shrink (the anchor): 2 nodes, a layout (TP2) valid at 1 and 2 nodes: the survivor goes on alone, with half the data parallelism.\n\n")
	b.WriteString("| case | node loss -> training again, median [min-max] | world size after |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| hot spare | %s | 4 (kept) |\n| shrink | %s | 2 |\n\n", r.Spare, r.Shrink)
	if x := Ratio(r.Spare, r.Shrink); x > 0 {
		fmt.Fprintf(&b, "The spare brings the job back in %.2fx the shrinking job's time. Both wait for the lost node's lease to end (%s); the shrinking round then also waits for the last call (%s), as no node count larger than the survivors is within reach, while the spare completes the largest valid size at once.\n", x, r.LeaseTTL, r.LastCall)
	}
	return b.String()
}
