package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/nettest"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// nodes is the number of hosts, and of agents, in every round.
const nodes = 3

// storePort is the store's client port on each host (the peers use the
// next one): every host is a namespace of its own, where nothing else
// binds.
const storePort = 29400

// agent is one node's gorun.
type agent struct {
	cmd      *exec.Cmd
	mark     string   // the round's mark (markEnv) in its environment
	out, err *os.File // our ends of its stdout and stderr
	done     chan struct{}
	code     int  // exit code, 128+signal when killed
	killed   bool // by the injector
}

// faultResult is one injected fault.
type faultResult struct {
	kind   Kind
	node   int
	at     time.Time
	target string // what was hit, e.g. "pid 1234"
	// recovered is the time from the fault to training again; ok is
	// false when the job never trained again within the round.
	recovered   time.Duration
	ok          bool
	interrupted bool // a new round of workers started after the fault
}

// roundResult is one job of the suite.
type roundResult struct {
	script   roundScript
	faults   []faultResult
	verdict  string // "completed", "failed: ..." (a clear verdict), "WRONG: ..."
	final    string
	orphans  []string
	leaked   []string
	exits    []int
	duration time.Duration
}

// expect holds the right final values of each workload.
type expect struct {
	ddp   final         // any world: bin/ddp trains the same model on every world size
	torch map[int]final // by world size
}

// check says whether f is the right result for the workload.
func (e expect) check(w Workload, f final) error {
	want, ok := e.ddp, true
	if w == TorchDDP {
		want, ok = e.torch[f.world]
	}
	switch {
	case !ok:
		return fmt.Errorf("no reference for world size %d", f.world)
	case math.Abs(f.loss-want.loss) > 1e-5*math.Max(1, math.Abs(want.loss)) || math.Abs(f.checksum-want.checksum) > 1e-4:
		return fmt.Errorf("%q; want loss=%v checksum=%v", f.text, want.loss, want.checksum)
	}
	return nil
}

// runner runs the rounds on one set of hosts.
type runner struct {
	cfg   Config
	hosts *nettest.Hosts
	tb    testing.TB
	want  expect
	dir   string
}

// runRound runs round r of script p.
func (rn *runner) runRound(ctx context.Context, r int, p roundScript) (res roundResult) {
	res.script = p
	start := time.Now()
	defer func() { res.duration = time.Since(start) }()
	ctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	mark := fmt.Sprintf("%d-%d-%d", rn.cfg.Seed, r, time.Now().UnixNano())
	dir := filepath.Join(rn.dir, "round"+strconv.Itoa(r))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		res.verdict = "WRONG: " + err.Error()
		return res
	}
	shmBefore := shmFiles()
	ev := &events{}
	agents := make([]*agent, nodes)
	defer killMarked(mark) // whatever a failed round left
	for i := range agents {
		a, err := rn.startAgent(ctx, i, mark, dir, p.workload, ev)
		if err != nil {
			res.verdict = "WRONG: start agent: " + err.Error()
			return res
		}
		agents[i] = a
	}
	rng := rand.New(rand.NewPCG(rn.cfg.Seed, uint64(r)+1))
	lost := map[int]bool{}
	for _, f := range p.faults {
		fr, err := rn.inject(ctx, f, rng, agents, lost, ev, dir)
		if errors.Is(err, errJobOver) {
			break // the job ended before this fault: it is not counted
		}
		if err != nil {
			res.verdict = "WRONG: " + err.Error()
			break
		}
		res.faults = append(res.faults, fr)
	}
	// The job's end: every agent exits.
	for i, a := range agents {
		select {
		case <-a.done:
		case <-ctx.Done():
			if res.verdict == "" {
				res.verdict = fmt.Sprintf("WRONG: node %d's agent still running after %v", i, roundTimeout)
			}
			// Where it is stuck: Go prints every goroutine on SIGABRT (gorun
			// forwards SIGQUIT to its workers).
			_ = a.cmd.Process.Signal(syscall.SIGABRT)
			select {
			case <-a.done:
			case <-time.After(5 * time.Second):
			}
			killMarked(mark)
			<-a.done
		}
		res.exits = append(res.exits, a.code)
	}
	rn.judge(&res, p.workload, agents, ev)
	// Nothing of the job may outlive it: its processes go with their
	// agents (a killed agent's guardian ends its workers) within moments.
	var left []int
	poll(10*time.Second, func() bool { left = marked(mark); return len(left) == 0 })
	for _, pid := range left {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		res.orphans = append(res.orphans, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")))
	}
	res.leaked = leakedShm(shmBefore)
	for _, a := range agents {
		a.out.Close()
		a.err.Close()
	}
	if rn.cfg.Verbose || res.verdict != "completed" {
		for i := range agents {
			rn.cfg.Logf("round %d, node %d:\n%s", r, i, transcript(ev.snapshot(), i))
		}
	}
	return res
}

// judge gives the round's verdict from its agents' exits and lines.
func (rn *runner) judge(res *roundResult, w Workload, agents []*agent, ev *events) {
	if res.verdict != "" {
		return
	}
	lines := ev.snapshot()
	fs := finals(lines)
	succeeded, failed := 0, 0
	for _, a := range agents {
		switch {
		case a.killed:
		case a.code == 0:
			succeeded++
		default:
			failed++
		}
	}
	switch {
	case succeeded > 0 && len(fs) == 0:
		res.verdict = "WRONG: agents exited 0 but no rank 0 printed a final line"
	case succeeded > 0:
		f := fs[len(fs)-1]
		res.final = f.text
		if err := rn.want.check(w, f); err != nil {
			res.verdict = "WRONG: " + err.Error()
			return
		}
		res.verdict = "completed"
		if failed > 0 {
			res.verdict = fmt.Sprintf("completed (%d agents exited non-zero)", failed)
		}
	default:
		// A failure must come with each agent's verdict: the last line it
		// wrote of its own ("gorun: ..."), a warning being none.
		for i, a := range agents {
			if a.killed {
				continue
			}
			why := ""
			for _, l := range lines {
				if l.node == i && l.stderr && strings.HasPrefix(l.text, "gorun: ") && !strings.HasPrefix(l.text, "gorun: warning") {
					why = l.text
				}
			}
			if why == "" {
				res.verdict = fmt.Sprintf("WRONG: node %d failed (exit %d) without saying why", i, a.code)
				return
			}
			if res.verdict == "" {
				res.verdict = "failed: " + why
			}
		}
	}
}

// startAgent starts node i's gorun on host i.
func (rn *runner) startAgent(ctx context.Context, i int, mark, dir string, w Workload, ev *events) (*agent, error) {
	h := rn.hosts
	members := h.Addr(0) + "+" + h.Addr(1) + "+" + h.Addr(2)
	script := filepath.Join(dir, "worker.sh")
	if err := os.WriteFile(script, []byte(workerScript), 0o755); err != nil {
		return nil, err
	}
	nproc, program := "2", []string{rn.cfg.DDP, "--steps", strconv.Itoa(ddpSteps), "--step-time", stepTime.String()}
	if w == TorchDDP {
		nproc, program = "1", []string{rn.cfg.Python, "-u", rn.cfg.TrainScript, "--steps", strconv.Itoa(torchSteps),
			"--step-time", strconv.FormatFloat(stepTime.Seconds(), 'f', 3, 64)}
	}
	rdzvConf := fmt.Sprintf("--rdzv-conf=store_hosts=%s,lease_ttl=%d,last_call_timeout=%d,connect_timeout=30,join_timeout=60",
		members, int(leaseTTL/time.Second), int(lastCall/time.Second))
	if rn.cfg.StoreLogLevel != "" {
		rdzvConf += ",store_log_level=" + rn.cfg.StoreLogLevel
	}
	args := append([]string{rn.cfg.Gorun, "--rdzv-backend=c10d", fmt.Sprintf("--rdzv-endpoint=%s:%d", h.Addr(0), storePort),
		"--nproc-per-node=" + nproc, "--rdzv-id=chaos-" + mark, "--local-addr=" + h.Addr(i), "--nnodes=2:3", "--max-restarts=" + strconv.Itoa(maxRestarts),
		rdzvConf, "--no-python", script}, program...)
	cmd := h.Command(context.Background(), i, args...)
	// Gloo takes the address of the host's name, which every namespace
	// shares: its own interface instead, as on a cluster whose host names
	// resolve elsewhere.
	cmd.Env = append(agentEnv(), "GLOO_SOCKET_IFNAME=eth0", "GOTRACEBACK=all", markEnv+"="+mark, "GORUN_CHAOS_NODE="+strconv.Itoa(i), "GORUN_CHAOS_DIR="+dir,
		"GORUN_RDZV_TOKEN="+strings.Repeat(fmt.Sprintf("%016x", rn.cfg.Seed), 2)+"chaos"+mark)
	// Its own process group, for the faults; dead with the suite should
	// the suite be killed (best effort: the signal comes when the thread
	// that started it ends).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	a := &agent{cmd: cmd, mark: mark, done: make(chan struct{})}
	var w1, w2 *os.File
	var err error
	if a.out, w1, err = os.Pipe(); err != nil {
		return nil, err
	}
	if a.err, w2, err = os.Pipe(); err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w1, w2
	err = cmd.Start()
	w1.Close()
	w2.Close()
	if err != nil {
		return nil, err
	}
	go ev.read(a.out, i, false)
	go ev.read(a.err, i, true)
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
				a.code = 128 + int(ws.Signal())
			} else {
				a.code = ee.ExitCode()
			}
		}
		close(a.done)
	}()
	return a, nil
}

// agentEnv is this process's environment without what would change the
// job's shape or gorun's defaults, with one thread per worker.
func agentEnv() []string { return append(proctest.GorunEnv(), "OMP_NUM_THREADS=1") }

// poll calls cond every 20 ms until it holds or within passes, and says
// whether it held.
func poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
