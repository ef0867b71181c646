// Package launchlines runs the torchrun lines that popular projects ship
// (torchtitan, torchchat, nanoGPT, Megatron-LM, Hugging Face accelerate,
// torchrun's own usage examples) with gorun, unchanged but for the
// command's name, and checks that each forms the job the line describes.
//
// Each case holds the project's line as the project's file has it (its
// repository and path in a comment), with the shell lines around it that
// set its variables. The test runs that text with bash, where the word
// `torchrun` becomes `exec "$GORUN"` (the gorun binary built for the
// test): bash expands and splits the line exactly as it does on the
// project's machines, flags, quoting and all. The training script the
// line names is a stand-in of the same name in testdata (standin.py):
// it records its torchrun variables and arguments, joins its world over
// MASTER_ADDR:MASTER_PORT (a TCP exchange of ranks, or a gloo all-reduce
// for two lines), and prints a line to stdout and one to stderr.
//
// Multi-node lines run one gorun per node on this machine, each in its
// own bash, all with one HOME (gorun shares the job token of a c10d job
// through it; no token is given anywhere). The checks: every gorun exits
// 0; the workers' ranks are 0..WORLD_SIZE-1 once each, in node order (a
// static line's --node_rank, else the rendezvous's group ranks); every
// worker has the line's world size, role, master, run id and restart
// budget; the workers met over the master address; the stand-in got the
// arguments the line gives it; its output reached the console with the
// prefix of its role and rank, only for the local ranks a
// --local-ranks-filter shows; and, where the line asks for log files
// (--tee), each local rank's stdout.log and stderr.log hold its output.
package launchlines

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/internal/testkit/torchpy"
)

var (
	// gorunBin is gorun built for these tests, beside its gorun-etcd.
	gorunBin string
	// python runs the workers: internal/testkit/torchpy's choice
	// (PyTorch 2.x, the reference, where its environment exists).
	python string
	// testdata is the absolute path of the stand-ins; the lines run in it.
	testdata string
	// torchMissing says why the gloo cases cannot run here ("" if they can).
	torchMissing string
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The cases mostly wait: on rendezvous, on Python starting.
	proctest.RunMostlyWaiting(16)
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var remove func()
	var err error
	if gorunBin, remove, err = proctest.BuildGorun("../.."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer remove()
	if testdata, err = filepath.Abs("testdata"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := exec.LookPath("bash"); err != nil {
		fmt.Fprintln(os.Stderr, "launchlines: the lines are shell; bash is needed:", err)
		return 1
	}
	choice := torchpy.Find("../..")
	python = choice.Python
	fmt.Fprintln(os.Stderr, "launchlines: workers run on", choice)
	if choice.Missing != "" {
		torchMissing = choice.String()
		fmt.Fprintf(os.Stderr, "launchlines: TORCH NOT INSTALLED, the gloo cases are skipped: %s\n", torchMissing)
	}
	return m.Run()
}

// launchTimeout bounds one gorun: the machine has 2 cores and others run
// their tests on it too.
const launchTimeout = 3 * time.Minute

// agent is one node's launch: the project's shell text (the lines that set
// the line's variables, then the line, with `torchrun` in it), the
// script's positional parameters ($1 ...) and variables the user would
// have set (NGPU=4 ./run_train.sh).
type agent struct {
	shell string
	args  []string
	env   []string
	// lateAfter, where set, starts this agent only once the first agent's
	// console shows that text (a node that joins a running job).
	lateAfter string
}

// job is what a line (one per node) should make.
type job struct {
	// entry is how the line names the training script: {"train.py"}, or
	// {"-m", "torchtitan.train"}; what follows it is the script's.
	entry []string
	// nproc is each agent's worker count.
	nproc []int
	// nodeRank is each agent's --node_rank (static lines); nil where the
	// rendezvous decides the group ranks.
	nodeRank []int
	role     string
	// masterAddr and masterPort are the master the line names ("" where
	// the launcher picks one).
	masterAddr, masterPort string
	// runID is the line's --rdzv_id ("" for any), maxRestarts its
	// --max-restarts ("" for the default, 0).
	runID, maxRestarts string
	// shown is the local ranks the console shows (--local-ranks-filter);
	// nil for all.
	shown []int
	// tee: the line asks for log files of every local rank.
	tee bool
	// gloo: the workers join their world by a gloo all-reduce (torch).
	gloo bool
	// env is more variables every worker must see, as the line sets them.
	env map[string]string
	// waitWorld: workers of a smaller world wait to be replaced (an
	// elastic round that closed before every agent joined).
	waitWorld int
}

// outcome is a finished launch.
type outcome struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
	argv           []string // gorun's arguments, as bash gave them
}

func (o outcome) String() string {
	return fmt.Sprintf("gorun %q: exit %d after %v\n--- stdout:\n%s--- stderr:\n%s", o.argv, o.code, o.elapsed.Round(time.Millisecond), o.stdout, o.stderr)
}

// cleanEnv is this process's environment without what would change a
// launch's shape or defaults (proctest.GorunEnv's list, the launch
// lines' own variables), with HOME and TMPDIR of the job's own, the
// stand-ins on PYTHONPATH and Debian's Python as the workers'.
func cleanEnv(home, tmp string) []string {
	env := proctest.GorunEnv("LAUNCHLINES_*", "HOME", "TMPDIR", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING",
		"PYTHONPATH", "RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "NGPU", "LOG_RANK", "CONFIG_FILE", "MODULE", "CONFIG",
		"COMM_MODE", "TORCHFT_LIGHTHOUSE", "CUDA_VISIBLE_DEVICES", "BASH_ENV", "ENV")
	return append(env, "HOME="+home, "TMPDIR="+tmp, "PYTHON_EXEC="+python, "PYTHONDONTWRITEBYTECODE=1",
		"PYTHONPATH="+testdata, "GORUN="+gorunBin)
}

// shortTempDir is a new folder removed at the end of the test, with a
// short path: Unix socket paths in TMPDIR must stay under 108 bytes.
func shortTempDir(t *testing.T) string { return proctest.ShortTempDir(t, "ll-") }

// freePort is a TCP port the kernel reports free on 127.0.0.1.
func freePort(t *testing.T) string { return strconv.Itoa(proctest.FreePort(t, "127.0.0.1")) }

// torchrunWord is the command's name in a line.
var torchrunWord = regexp.MustCompile(`(^|[\s;])torchrun\s`)

// withCommand is shell with its one torchrun command run as cmd instead.
func withCommand(t *testing.T, shell, cmd string) string {
	t.Helper()
	at := torchrunWord.FindAllStringSubmatchIndex(shell, -1)
	if len(at) != 1 {
		t.Fatalf("the line should run torchrun once; it does %d times:\n%s", len(at), shell)
	}
	word := at[0][3] // the end of the group before the word
	return shell[:word] + cmd + shell[word+len("torchrun"):]
}

// bash is the command that runs shell with a's positional parameters in
// the stand-ins' folder.
func (a agent) bash(t *testing.T, shell string, env []string) *exec.Cmd {
	cmd := exec.Command("bash", append([]string{"-c", shell, "bash"}, a.args...)...)
	cmd.Dir = testdata
	cmd.Env = append(env, a.env...)
	return cmd
}

// expand is the argument list bash gives torchrun in a's line.
func (a agent) expand(t *testing.T, env []string) []string {
	t.Helper()
	cmd := a.bash(t, withCommand(t, a.shell, `printf '%s\0'`), env)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("expanding the line: %v\n%s\n%s", err, stderr.String(), a.shell)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

// running is a launch in progress.
type running struct {
	cmd       *exec.Cmd
	out, errb *proctest.Buffer
	start     time.Time
	done      chan struct{}
	result    outcome
	waitErr   error
}

// start runs a's line with gorun; it is killed at the end of the test if
// it still runs (bash has exec'd gorun: the pid is gorun's, whose workers
// die with it).
func (a agent) start(t *testing.T, env []string) *running {
	t.Helper()
	argv := a.expand(t, env)
	r := &running{cmd: a.bash(t, withCommand(t, a.shell, `exec "$GORUN"`), env), out: &proctest.Buffer{}, errb: &proctest.Buffer{}, done: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.errb
	r.cmd.WaitDelay = 3 * time.Second
	r.start = time.Now()
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("gorun %q: %v", argv, err)
	}
	go func() {
		err := r.cmd.Wait()
		code := 0
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		case errors.Is(err, exec.ErrWaitDelay):
			code = r.cmd.ProcessState.ExitCode()
		case err != nil:
			r.waitErr = err
		}
		r.result = outcome{code: code, stdout: r.out.String(), stderr: r.errb.String(), elapsed: time.Since(r.start), argv: argv}
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// wait waits for the launch to end, failing the test after launchTimeout.
func (r *running) wait(t *testing.T) outcome {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(launchTimeout - time.Since(r.start)):
		r.cmd.Process.Kill()
		<-r.done
		t.Fatalf("still running after %v; killed\n%s", launchTimeout, r.result)
	}
	if r.waitErr != nil {
		t.Fatalf("%v\n%s", r.waitErr, r.result)
	}
	t.Logf("gorun %q: exit %d in %v", r.result.argv, r.result.code, r.result.elapsed.Round(time.Millisecond))
	return r.result
}

// workerReport is what one worker wrote: its variables, ARGV, NODE and JOINED.
type workerReport struct {
	file string
	vars map[string]string
	argv []string
}

func (r workerReport) String() string { return fmt.Sprintf("%s: %v argv=%q", r.file, r.vars, r.argv) }

func (r workerReport) int(t *testing.T, key string) int {
	t.Helper()
	n, err := strconv.Atoi(r.vars[key])
	if err != nil {
		t.Fatalf("%s=%q is not a number: %v", key, r.vars[key], r)
	}
	return n
}

// workerReports reads the workers' reports in dir.
func workerReports(t *testing.T, dir string) []workerReport {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var reports []workerReport
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		raw := map[string]any{}
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatalf("%s: %v: %s", f, err, data)
		}
		report := workerReport{file: filepath.Base(f), vars: map[string]string{}}
		for k, v := range raw {
			switch v := v.(type) {
			case string:
				report.vars[k] = v
			case []any:
				for _, a := range v {
					report.argv = append(report.argv, fmt.Sprint(a))
				}
			}
		}
		reports = append(reports, report)
	}
	return reports
}

// launch runs agents at once, one gorun each, as the nodes of one job on
// this host, and checks the job is the one j describes.
func launch(t *testing.T, j job, agents ...agent) {
	t.Helper()
	if j.gloo && torchMissing != "" {
		t.Skip("TORCH NOT INSTALLED, the workers need it: " + torchMissing)
	}
	home, out := t.TempDir(), t.TempDir()
	var rs []*running
	for i, a := range agents {
		env := append(cleanEnv(home, shortTempDir(t)), "LAUNCHLINES_OUT="+out, "LAUNCHLINES_NODE="+strconv.Itoa(i))
		if j.gloo {
			env = append(env, "LAUNCHLINES_GLOO=1")
		}
		if j.waitWorld > 0 {
			env = append(env, "LAUNCHLINES_WAIT_WORLD="+strconv.Itoa(j.waitWorld))
		}
		if a.lateAfter != "" {
			proctest.WaitFor(t, fmt.Sprintf("%q on the first agent's console", a.lateAfter), launchTimeout, func() bool {
				return strings.Contains(rs[0].out.String(), a.lateAfter)
			})
		}
		rs = append(rs, a.start(t, env))
	}
	var outs []outcome
	for _, r := range rs {
		outs = append(outs, r.wait(t))
	}
	all := func() string {
		var b strings.Builder
		for i, o := range outs {
			fmt.Fprintf(&b, "=== agent %d: %s\n", i, o)
		}
		return b.String()
	}
	for i, o := range outs {
		if o.code != 0 {
			t.Errorf("agent %d: exit %d; want 0", i, o.code)
		}
	}
	if t.Failed() {
		t.Fatal(all())
	}
	checkJob(t, j, agents, outs, workerReports(t, out), all)
}

// checkJob checks the workers' reports and the agents' output against j.
func checkJob(t *testing.T, j job, agents []agent, outs []outcome, reports []workerReport, all func() string) {
	t.Helper()
	world := 0
	for _, n := range j.nproc {
		world += n
	}
	if len(reports) != world {
		t.Fatalf("%d workers wrote a workerReport; want %d (the world the line describes)\n%v\n%s", len(reports), world, reports, all())
	}
	// The workers of each agent: local ranks 0..nproc-1, one group rank.
	byAgent := make([][]workerReport, len(agents))
	for _, r := range reports {
		i, err := strconv.Atoi(r.vars["NODE"])
		if err != nil || i < 0 || i >= len(agents) {
			t.Fatalf("a worker of no agent: %v", r)
		}
		byAgent[i] = append(byAgent[i], r)
	}
	group := make([]int, len(agents))
	for i, rs := range byAgent {
		var local []int
		for _, r := range rs {
			local = append(local, r.int(t, "LOCAL_RANK"))
			if r.vars["GROUP_RANK"] != rs[0].vars["GROUP_RANK"] || r.int(t, "LOCAL_WORLD_SIZE") != j.nproc[i] {
				t.Errorf("agent %d (%d workers): worker %v", i, j.nproc[i], r)
			}
		}
		slices.Sort(local)
		if !slices.Equal(local, upTo(j.nproc[i])) {
			t.Fatalf("agent %d: local ranks %v; want %v\n%v", i, local, upTo(j.nproc[i]), rs)
		}
		group[i] = rs[0].int(t, "GROUP_RANK")
		if j.nodeRank != nil && group[i] != j.nodeRank[i] {
			t.Errorf("agent %d: GROUP_RANK %d; want its --node_rank %d", i, group[i], j.nodeRank[i])
		}
	}
	if got := slices.Sorted(slices.Values(group)); !slices.Equal(got, upTo(len(agents))) {
		t.Fatalf("the agents' group ranks are %v; want 0..%d once each\n%v", group, len(agents)-1, reports)
	}
	// Global ranks in group-rank order, as torchrun assigns them; the
	// rest of the job's shape the same for every worker.
	first := reports[0].vars
	if j.masterAddr == "" && first["MASTER_ADDR"] == "" || j.masterPort == "" && first["MASTER_PORT"] == "" {
		t.Errorf("no master: %v", reports[0])
	}
	// One attempt: the first, but where an elastic round may have closed
	// before every agent joined (the next round's attempt is the job's).
	restarts := "0"
	if j.waitWorld > 0 {
		restarts = first["TORCHELASTIC_RESTART_COUNT"]
	}
	// gorun's agent serves the workers' store (as torchrun 2.x's does),
	// on a static line of several nodes too: node 0 meets the others on
	// the master port through it, so that the port is never free between
	// the meeting and the workers (torchrun 2.x's static workers serve
	// their own, from rank 0).
	agentStore, via := "True", "store"
	if j.gloo {
		via = "gloo"
	}
	var ranks []int
	for i, rs := range byAgent {
		base := 0
		for k, n := range j.nproc {
			if group[k] < group[i] {
				base += n
			}
		}
		for _, r := range rs {
			ranks = append(ranks, r.int(t, "RANK"))
			want := map[string]string{
				"RANK":                         strconv.Itoa(base + r.int(t, "LOCAL_RANK")),
				"WORLD_SIZE":                   strconv.Itoa(world),
				"GROUP_WORLD_SIZE":             strconv.Itoa(len(agents)),
				"ROLE_NAME":                    j.role,
				"ROLE_RANK":                    strconv.Itoa(base + r.int(t, "LOCAL_RANK")),
				"ROLE_WORLD_SIZE":              strconv.Itoa(world),
				"MASTER_ADDR":                  cmp.Or(j.masterAddr, first["MASTER_ADDR"]),
				"MASTER_PORT":                  cmp.Or(j.masterPort, first["MASTER_PORT"]),
				"TORCHELASTIC_RUN_ID":          cmp.Or(j.runID, first["TORCHELASTIC_RUN_ID"]),
				"TORCHELASTIC_MAX_RESTARTS":    cmp.Or(j.maxRestarts, "0"),
				"TORCHELASTIC_RESTART_COUNT":   restarts,
				"TORCHELASTIC_USE_AGENT_STORE": agentStore,
				"JOINED":                       fmt.Sprintf("%s sum=%d world=%d", via, world*(world-1)/2, world),
			}
			for k, v := range j.env {
				want[k] = v
			}
			for k, v := range want {
				if r.vars[k] != v {
					t.Errorf("agent %d, local rank %s: %s=%q; want %q\n(all: %v)", i, r.vars["LOCAL_RANK"], k, r.vars[k], v, r)
				}
			}
		}
	}
	if slices.Sort(ranks); !slices.Equal(ranks, upTo(world)) {
		t.Errorf("ranks %v; want 0..%d once each", ranks, world-1)
	}
	// The script's arguments: what the line gives it, untouched.
	for i, rs := range byAgent {
		argv := outs[i].argv
		at := -1
		for k := range argv {
			if k+len(j.entry) <= len(argv) && slices.Equal(argv[k:k+len(j.entry)], j.entry) {
				at = k
				break
			}
		}
		if at < 0 {
			t.Fatalf("agent %d: the line names no %q: gorun %q", i, j.entry, argv)
		}
		want := argv[at+len(j.entry):]
		for _, r := range rs {
			if !slices.Equal(r.argv, want) && !(len(r.argv) == 0 && len(want) == 0) {
				t.Errorf("agent %d, rank %s: the script got %q; the line gives it %q", i, r.vars["RANK"], r.argv, want)
			}
		}
	}
	if t.Failed() {
		t.Fatal(all())
	}
	// The console: each worker's stdout line, prefixed with its role and
	// rank, for the local ranks shown.
	shown := func(local int) bool { return j.shown == nil || slices.Contains(j.shown, local) }
	for i, rs := range byAgent {
		for _, r := range rs {
			rank, local := r.vars["RANK"], r.int(t, "LOCAL_RANK")
			line := "standin: RANK=" + rank + " "
			prefixed := "[" + j.role + rank + "]:" + line
			switch {
			case shown(local) && !strings.Contains(outs[i].stdout, prefixed):
				t.Errorf("agent %d: no %q on the console (local rank %d is shown)", i, prefixed, local)
			case !shown(local) && strings.Contains(outs[i].stdout, line):
				t.Errorf("agent %d: local rank %d's output on the console; --local-ranks-filter shows only %v", i, local, j.shown)
			}
			errLine := "standin stderr: RANK=" + rank
			if shown(local) && !strings.Contains(outs[i].stderr, "["+j.role+rank+"]:"+errLine) {
				t.Errorf("agent %d: no %q on the console's stderr", i, "["+j.role+rank+"]:"+errLine)
			}
		}
	}
	// The log files the line asks for.
	if j.tee {
		for i, rs := range byAgent {
			m := logDirLine.FindStringSubmatch(outs[i].stderr)
			if m == nil {
				t.Errorf("agent %d: gorun says nowhere where the logs of --tee are (%s)", i, logDirLine)
				continue
			}
			for _, r := range rs {
				dir := filepath.Join(m[1], "attempt_"+r.vars["TORCHELASTIC_RESTART_COUNT"], r.vars["LOCAL_RANK"])
				for file, want := range map[string]string{"stdout.log": "standin: RANK=" + r.vars["RANK"] + " ", "stderr.log": "standin stderr: RANK=" + r.vars["RANK"]} {
					data, err := os.ReadFile(filepath.Join(dir, file))
					if err != nil {
						t.Errorf("agent %d, local rank %s: %v", i, r.vars["LOCAL_RANK"], err)
					} else if !strings.Contains(string(data), want) {
						t.Errorf("agent %d: %s holds no %q:\n%s", i, filepath.Join(dir, file), want, data)
					}
				}
			}
		}
	}
	if t.Failed() {
		t.Fatal(all())
	}
	t.Logf("a world of %d: ranks by agent %v, master %s:%s, run id %q, restart count %s, %s",
		world, ranksByAgent(byAgent), first["MASTER_ADDR"], first["MASTER_PORT"], first["TORCHELASTIC_RUN_ID"], restarts, first["JOINED"])
}

// logDirLine is gorun's note of where the logs of --tee/--redirects go
// without --log-dir.
var logDirLine = regexp.MustCompile(`worker logs in (\S+)`)

func ranksByAgent(byAgent [][]workerReport) [][]string {
	var out [][]string
	for _, rs := range byAgent {
		var ranks []string
		for _, r := range rs {
			ranks = append(ranks, r.vars["RANK"])
		}
		slices.SortFunc(ranks, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
		out = append(out, ranks)
	}
	return out
}

// upTo is 0, 1, ..., n-1.
func upTo(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
