package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Coordinated preemption across agents, end to end with the built
// binaries: a stop request made on one node (SIGTERM to its agent) or
// from outside the job (gorun stop) reaches every node through the
// embedded store; the workers all stop after the same step, save and exit
// 0, and every agent exits 75 (launcher.ExitPreempted). The job relaunched
// resumes and ends as an uninterrupted run. The worker side on one node is
// in preempt_workers_test.go.

// preemptExit is gorun's exit code for a clean stop on a stop request
// (launcher.ExitPreempted, sysexits.h's EX_TEMPFAIL).
const preemptExit = 75

// preemptStoppingRE matches a rank's "rank R stopping at step N" line,
// prefixed with its (global) rank.
var preemptStoppingRE = regexp.MustCompile(`(?m)^\[default(\d+)\]:rank (\d+) stopping at step (\d+)$`)

// preemptJob starts the n nodes of job run on the embedded store, at a
// free port of 127.0.0.1 hosted by node 0: node i runs on 127.0.0.<i+1>
// with args(i) after the rendezvous flags. It returns the store's
// endpoint and the nodes, whose logs are shown if the test fails.
func preemptJob(t *testing.T, run string, n int, args func(i int) []string) (string, []*node) {
	t.Helper()
	ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
	nodes := startNodes(t, n, func(i int) []string {
		return elasticArgs(ep, run, i, append([]string{"--nnodes=" + strconv.Itoa(n)}, args(i)...)...)
	})
	logNodesOnFailure(t, nodes)
	return ep, nodes
}

// preemptWaitAll waits for every node of a job and checks that each
// exited with code want.
func preemptWaitAll(t *testing.T, what string, nodes []*node, want int) {
	t.Helper()
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != want {
			t.Errorf("%s: node %d exit %d; want %d\nstdout:\n%s", what, i, code, want, n.stdout)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// preemptStdout is the stdout of every node of a job, in node order.
func preemptStdout(nodes []*node) string {
	var b strings.Builder
	for _, n := range nodes {
		b.WriteString(n.stdout.String())
	}
	return b.String()
}

// preemptStopStep checks that every rank of a world of size world said
// once that it stops, all at the same step, after step after, and returns
// that step (the next one to run).
func preemptStopStep(t *testing.T, out string, world, after int) int {
	t.Helper()
	m := preemptStoppingRE.FindAllStringSubmatch(out, -1)
	var ranks []int
	steps := map[string]bool{}
	for _, l := range m {
		r, _ := strconv.Atoi(l[2])
		if l[1] != l[2] {
			t.Errorf("line %q: the prefix's rank is not the rank's", l[0])
		}
		ranks = append(ranks, r)
		steps[l[3]] = true
	}
	slices.Sort(ranks)
	var want []int
	for r := range world {
		want = append(want, r)
	}
	if !slices.Equal(ranks, want) || len(steps) != 1 {
		t.Fatalf("stop lines %q; want one per rank 0-%d, all at the same step:\n%s", m, world-1, out)
	}
	next, _ := strconv.Atoi(m[0][3])
	if next <= after {
		t.Fatalf("stopped at step %d; want one after step %d, seen before the stop request", next, after)
	}
	return next
}

// preemptReport is the part of --report's JSON these tests read.
type preemptReport struct {
	ExitCode int                `json:"exit_code"`
	Seconds  map[string]float64 `json:"seconds"`
}

// preemptReadReport reads a --report file.
func preemptReadReport(t *testing.T, path string) preemptReport {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("--report: %v", err)
	}
	var r preemptReport
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("--report %s: %v\n%s", path, err, data)
	}
	return r
}

// checkPreemptedNode checks what a node of a preempted job left in its
// --log-dir and --report: the stop request in the run's events.jsonl,
// exit code 75 and time spent on the preemption.
func checkPreemptedNode(t *testing.T, i int, logDir, run, report string) {
	t.Helper()
	events, err := os.ReadFile(filepath.Join(runFolder(t, logDir, run), "events.jsonl"))
	if err != nil || !strings.Contains(string(events), `"event":"stop_request"`) {
		t.Errorf("node %d: events.jsonl lacks the stop request (%v):\n%s", i, err, events)
	}
	r := preemptReadReport(t, report)
	if r.ExitCode != preemptExit || r.Seconds["preemption"] <= 0 {
		t.Errorf("node %d: report exit_code %d, preemption %vs; want %d and above 0", i, r.ExitCode, r.Seconds["preemption"], preemptExit)
	}
}

// TestPreemptTwoNodeDDP proves that SIGTERM to one agent of a 2-node job
// (node 1, not the store's host) stops the whole job cleanly: the 4 ranks
// of bin/ddp all stop after the same step, rank 0 saves the checkpoint,
// both agents exit 75 and record the request (events.jsonl, --report); the
// job relaunched with the same --checkpoint resumes at that step and ends
// with the same final line as an uninterrupted 2-node run.
func TestPreemptTwoNodeDDP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	ddp := func(extra ...string) []string {
		return append([]string{"--nproc-per-node=2", "--no-python", ddpBin, "--steps", "200"}, extra...)
	}
	// The uninterrupted run, at the same time as the stopped one.
	_, ref := preemptJob(t, "ddp-ref", 2, func(int) []string { return ddp() })
	logDir := func(i int) string { return filepath.Join(dir, "logs"+strconv.Itoa(i)) }
	report := func(i int) string { return filepath.Join(dir, "report"+strconv.Itoa(i)+".json") }
	_, nodes := preemptJob(t, "ddp-stop", 2, func(i int) []string {
		return append([]string{"--log-dir", logDir(i), "--report", report(i)}, ddp("--step-time", "50ms", "--checkpoint", ckpt)...)
	})
	// Every step all-reduces over the 4 ranks: rank 0 (on either node:
	// the rendezvous orders the nodes) at step 3 means every rank of both
	// nodes is training.
	waitFor(t, "a few steps", func() bool { return strings.Contains(preemptStdout(nodes), "[default0]:step 3 loss=") })
	if err := nodes[1].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	preemptWaitAll(t, "stopped run", nodes, preemptExit)
	out := preemptStdout(nodes)
	next := preemptStopStep(t, out, 4, 3)
	t.Logf("every rank stopped before step %d", next)
	if want := "[default0]:preempted: saved step " + strconv.Itoa(next) + " to " + ckpt + "\n"; !strings.Contains(out, want) {
		t.Errorf("stdout lacks %q:\n%s", want, out)
	}
	if strings.Contains(out, "final loss=") {
		t.Errorf("the stopped run finished:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(ckpt, "ddp.ckpt")); err != nil {
		t.Errorf("checkpoint: %v", err)
	}
	for i, n := range nodes {
		if !strings.Contains(n.stderr.String(), "preempted cleanly") {
			t.Errorf("node %d does not say it was preempted cleanly:\n%s", i, n.stderr)
		}
		checkPreemptedNode(t, i, logDir(i), "ddp-stop", report(i))
	}

	preemptWaitAll(t, "uninterrupted run", ref, 0)
	want := finalLine(preemptStdout(ref))
	if want == "" || !strings.HasSuffix(want, " world=4") {
		t.Fatalf("uninterrupted run's final line %q:\n%s", want, preemptStdout(ref))
	}
	// The same job again, not asked to stop, as fast as it goes.
	_, again := preemptJob(t, "ddp-resume", 2, func(int) []string { return ddp("--checkpoint", ckpt) })
	preemptWaitAll(t, "resumed run", again, 0)
	out = preemptStdout(again)
	if w := "[default0]:resumed at step " + strconv.Itoa(next) + "\n"; !strings.Contains(out, w) {
		t.Errorf("resumed run lacks %q:\n%s", w, out)
	}
	if steps := linesWithPrefix(out, "[default0]:step "); len(steps) == 0 || !strings.HasPrefix(steps[0], strconv.Itoa(next)+" ") {
		t.Errorf("resumed run's first step %.40q; want step %d", steps, next)
	}
	if got := finalLine(out); got != want {
		t.Errorf("resumed run ends %q; the uninterrupted run %q", got, want)
	}
}

// TestPreemptTorchGloo proves the same for PyTorch over gloo, 2 nodes of
// one worker each, the stop requested from outside the job by `gorun stop
// RUN_ID` against the job's store: both ranks stop after the same step and
// save, both agents exit 75, and the job relaunched resumes and ends with
// the same final line as an uninterrupted run.
func TestPreemptTorchGloo(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	train := func(extra ...string) []string {
		return append([]string{"--nproc-per-node=1", "--python", py, ddpExample, "--steps", "30"}, extra...)
	}
	_, ref := preemptJob(t, "torch-ref", 2, func(int) []string { return train() })
	ep, nodes := preemptJob(t, "torch-stop", 2, func(int) []string { return train("--step-time", "0.2", "--checkpoint", ckpt) })
	waitForTorch(t, "a few steps on both nodes", func() bool {
		out := preemptStdout(nodes)
		return strings.Contains(out, "[default0]:step 2 loss ") && strings.Contains(out, "[default1]:step 2 loss ")
	})
	r := runGorun(t, testEnv(), "stop", "--rdzv-endpoint="+ep, "torch-stop")
	if r.code != 0 || !strings.Contains(r.stdout, "stop requested for job torch-stop") {
		t.Fatalf("gorun stop: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	preemptWaitAll(t, "stopped run", nodes, preemptExit)
	out := preemptStdout(nodes)
	next := preemptStopStep(t, out, 2, 2)
	t.Logf("both ranks stopped before step %d", next)
	if want := "[default0]:preempted: saved step " + strconv.Itoa(next) + " to " + ckpt + "\n"; !strings.Contains(out, want) {
		t.Errorf("stdout lacks %q:\n%s", want, out)
	}
	for _, f := range []string{"ckpt-rank0.pt", "ckpt-rank1.pt"} {
		if _, err := os.Stat(filepath.Join(ckpt, f)); err != nil {
			t.Errorf("checkpoint: %v", err)
		}
	}
	for i, n := range nodes {
		if s := n.stderr.String(); !strings.Contains(s, "asked to stop (gorun stop)") || !strings.Contains(s, "preempted cleanly") {
			t.Errorf("node %d does not report the stop request and the clean stop:\n%s", i, s)
		}
	}

	preemptWaitAll(t, "uninterrupted run", ref, 0)
	want := finalLine(preemptStdout(ref))
	if want == "" || !strings.HasSuffix(want, " world=2") {
		t.Fatalf("uninterrupted run's final line %q:\n%s", want, preemptStdout(ref))
	}
	_, again := preemptJob(t, "torch-resume", 2, func(int) []string { return train("--checkpoint", ckpt) })
	preemptWaitAll(t, "resumed run", again, 0)
	out = preemptStdout(again)
	if w := "[default0]:resumed at step " + strconv.Itoa(next) + "\n"; !strings.Contains(out, w) {
		t.Errorf("resumed run lacks %q:\n%s", w, out)
	}
	if got := finalLine(out); got != want {
		t.Errorf("resumed run ends %q; the uninterrupted run %q", got, want)
	}
}

// Shell workers for TestPreemptExitCodes. Each records the stop variables
// it got ($1/env.$RANK), sets its traps, says it is ready, then waits.
const (
	preemptEnvScript = `printf 'signal=%s file=%s ignored=%s\n' "${GORUN_STOP_SIGNAL-unset}" "${GORUN_STOP_FILE:+set}" "${GORUN_IGNORED_SIGNALS-unset}" > "$1/env.$RANK"
`
	preemptWaitScript = `touch "$1/ready.$RANK"
while :; do sleep 0.05 & wait $!; done
`
	// The worker's record of a signal: its name, then FILE if the stop
	// file exists then.
	preemptRecord = `echo $sig >> "$1/got.$RANK"; [ -n "$GORUN_STOP_FILE" ] && [ -e "$GORUN_STOP_FILE" ] && echo FILE >> "$1/got.$RANK"`
)

// preemptTrap traps sig: records it, then runs then.
func preemptTrap(sig, then string) string {
	return "trap 'sig=" + sig + "; " + preemptRecord + "; " + then + "' " + sig + "\n"
}

// TestPreemptExitCodes proves gorun's exit code, at the command line, for
// each way a single node's workers can answer a stop request: 75 only
// when every worker exits 0 (with the stop file there when the worker
// signal comes, the report saying so); 143 when they ignore it past
// --preempt-grace, when they die of the worker signal, or when
// --preempt-grace=0 turns preemption off (as launcher's
// TestAgentForwardsSignals expects). It also checks the stop variables the
// workers get: GORUN_STOP_SIGNAL=TERM by default, unset with
// --preempt-worker-signal=none (the file alone tells them), both unset
// without preemption; and that --preempt-signal=SIGUSR1 makes SIGUSR1 the
// stop request while the workers still get SIGTERM, and start with
// SIGUSR1 ignored (GORUN_IGNORED_SIGNALS=USR1).
func TestPreemptExitCodes(t *testing.T) {
	t.Parallel()
	saveAndExit := `while [ ! -e "$GORUN_STOP_FILE" ]; do sleep 0.01; done; exit 0`
	for _, tt := range []struct {
		name   string
		flags  []string
		script string         // after the environment's record
		send   syscall.Signal // to gorun once the workers are ready
		code   int
		stderr string        // in gorun's stderr
		env    string        // the worker's stop variables, as preemptEnvScript writes them
		got    string        // what each worker recorded (a prefix)
		least  time.Duration // gorun runs at least this long after the signal
		only   bool          // got is all each worker recorded
	}{
		{
			name:   "ignored past the grace",
			flags:  []string{"--preempt-grace=1s", "--stop-timeout=1s"},
			script: preemptTrap("TERM", ":") + preemptWaitScript,
			send:   syscall.SIGTERM,
			code:   143,
			stderr: "the workers did not stop within 1s",
			env:    "signal=TERM file=set ignored=unset",
			// SIGKILL at the grace's end, not a second SIGTERM and
			// --stop-timeout more: they had their SIGTERM, and Slurm's
			// SIGKILL (KillWait 30 s) would come before gorun's.
			got:   "TERM\nFILE\n",
			only:  true,
			least: time.Second,
		},
		{
			name:   "killed by the worker signal",
			script: preemptWaitScript,
			send:   syscall.SIGTERM,
			code:   143,
			stderr: "instead of saving and exiting 0",
			env:    "signal=TERM file=set ignored=unset",
			got:    "",
		},
		{
			name:   "saved and exited 0",
			script: preemptTrap("TERM", saveAndExit) + preemptWaitScript,
			send:   syscall.SIGTERM,
			code:   preemptExit,
			stderr: "preempted cleanly",
			env:    "signal=TERM file=set ignored=unset",
			got:    "TERM\nFILE\n",
		},
		{
			name:   "preemption off",
			flags:  []string{"--preempt-grace=0"},
			script: preemptTrap("TERM", "exit 0") + preemptWaitScript,
			send:   syscall.SIGTERM,
			code:   143,
			env:    "signal=unset file= ignored=unset",
			got:    "TERM\n",
		},
		{
			name:   "SIGUSR1 asks, SIGTERM tells",
			flags:  []string{"--preempt-signal=SIGUSR1"},
			script: preemptTrap("TERM", saveAndExit) + preemptTrap("USR1", ":") + preemptWaitScript,
			send:   syscall.SIGUSR1,
			code:   preemptExit,
			stderr: "preempted cleanly",
			env:    "signal=TERM file=set ignored=USR1",
			got:    "TERM\nFILE\n",
		},
		{
			name:  "no worker signal: the file alone",
			flags: []string{"--preempt-signal=SIGUSR1", "--preempt-worker-signal=none"},
			script: preemptTrap("TERM", ":") + preemptTrap("USR1", ":") + `touch "$1/ready.$RANK"
until [ -e "$GORUN_STOP_FILE" ]; do sleep 0.02 & wait $!; done
echo FILE >> "$1/got.$RANK"; exit 0
`,
			send:   syscall.SIGUSR1,
			code:   preemptExit,
			stderr: "preempted cleanly",
			env:    "signal=unset file=set ignored=USR1",
			got:    "FILE\n",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			report := filepath.Join(dir, "report.json")
			script := writeScript(t, preemptEnvScript+tt.script)
			args := append([]string{"--nproc-per-node=2", "--report", report}, tt.flags...)
			cmd, stdout, stderr := startGorun(t, testEnv(), append(args, "--no-python", script, dir)...)
			waitFor(t, "workers ready", func() bool {
				m, _ := filepath.Glob(filepath.Join(dir, "ready.*"))
				return len(m) == 2
			})
			sent := time.Now()
			if err := cmd.Process.Signal(tt.send); err != nil {
				t.Fatal(err)
			}
			code := waitExit(t, cmd)
			if took := time.Since(sent); took < tt.least {
				t.Errorf("gorun exited %v after the signal; want at least %v (the grace)", took, tt.least)
			}
			if code != tt.code || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("exit %d; want %d and stderr with %q\nstdout:\n%s\nstderr:\n%s", code, tt.code, tt.stderr, stdout, stderr)
			}
			for r := range 2 {
				env, _ := os.ReadFile(filepath.Join(dir, "env."+strconv.Itoa(r)))
				if got := strings.TrimSpace(string(env)); got != tt.env {
					t.Errorf("rank %d's stop variables: %s; want %s", r, got, tt.env)
				}
				got, _ := os.ReadFile(filepath.Join(dir, "got."+strconv.Itoa(r)))
				if !strings.HasPrefix(string(got), tt.got) || (tt.got == "" && len(got) > 0) {
					t.Errorf("rank %d recorded %q; want %q first", r, got, tt.got)
				}
				if (tt.only || tt.got == "FILE\n") && string(got) != tt.got {
					t.Errorf("rank %d recorded %q; want %q and no other signal", r, got, tt.got)
				}
			}
			rep := preemptReadReport(t, report)
			if rep.ExitCode != tt.code {
				t.Errorf("report exit_code %d; want %d", rep.ExitCode, tt.code)
			}
			if tt.code == preemptExit && rep.Seconds["preemption"] <= 0 {
				t.Errorf("report: %vs of preemption; want above 0", rep.Seconds["preemption"])
			}
		})
	}
}

// TestStopCommandRefusesWrongToken proves that `gorun stop` does not stop
// a job it cannot prove it may steer: a wrong token (in GORUN_RDZV_TOKEN or
// a token_file), no token, or a run id the store does not hold make it
// exit non-zero saying why, and the running 2-node job does not learn of
// any stop request and completes normally (exit 0). As a control, the
// same command with the job's token and id stops a second job (exit 75,
// with the --grace it gave).
func TestStopCommandRefusesWrongToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Each worker handles SIGTERM (the worker signal), waits for $1/go,
	// then records whether the stop file exists.
	script := writeScript(t, `trap : TERM
touch "$1/running.$RANK"
while [ ! -e "$1/go" ]; do sleep 0.02; done
if [ -n "$GORUN_STOP_FILE" ] && [ -e "$GORUN_STOP_FILE" ]; then echo stop > "$1/seen.$RANK"; else echo none > "$1/seen.$RANK"; fi
`)
	job := func(run string) (string, []*node) {
		d := filepath.Join(dir, run)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		ep, nodes := preemptJob(t, run, 2, func(int) []string { return []string{"--no-python", script, d} })
		waitFor(t, "the workers of "+run, func() bool {
			m, _ := filepath.Glob(filepath.Join(d, "running.*"))
			return len(m) == 2
		})
		return ep, nodes
	}
	ep, nodes := job("guarded")
	tokenFile := filepath.Join(dir, "wrong.token")
	if err := os.WriteFile(tokenFile, []byte("another-token-0123456789abcdef0123"), 0o600); err != nil {
		t.Fatal(err)
	}
	noToken := []string{"HOME=" + t.TempDir()} // no job token file there either
	for _, kv := range testEnv() {
		if !strings.HasPrefix(kv, "GORUN_RDZV_TOKEN=") {
			noToken = append(noToken, kv)
		}
	}
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		code int
		msg  string
	}{
		{"wrong token", testEnv("GORUN_RDZV_TOKEN=another-token-0123456789abcdef0123"), []string{"guarded"}, 1, "do not match"},
		{"wrong token file", noToken, []string{"--rdzv-conf", "token_file=" + tokenFile, "guarded"}, 1, "do not match"},
		{"no token", noToken, []string{"guarded"}, 2, "needs the job's token"},
		{"unknown run id", testEnv(), []string{"guardedx"}, 1, `no job "guardedx"`},
	} {
		r := runGorun(t, tt.env, append([]string{"stop", "--rdzv-endpoint=" + ep}, tt.args...)...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.msg) || strings.Contains(r.stdout, "stop requested") {
			t.Errorf("%s: gorun stop exit %d; want %d and %q\nstdout:\n%s\nstderr:\n%s", tt.name, r.code, tt.code, tt.msg, r.stdout, r.stderr)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "guarded", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	preemptWaitAll(t, "the job refused stops were aimed at", nodes, 0)
	for i, n := range nodes {
		if strings.Contains(n.stderr.String(), "asked to stop") {
			t.Errorf("node %d learned of a stop request:\n%s", i, n.stderr)
		}
	}
	for r := range 2 {
		if seen, _ := os.ReadFile(filepath.Join(dir, "guarded", "seen."+strconv.Itoa(r))); string(seen) != "none\n" {
			t.Errorf("rank %d saw the stop file: %q", r, seen)
		}
	}

	// The control: the job's own token and id.
	ep, nodes = job("control")
	r := runGorun(t, testEnv(), "stop", "--rdzv-backend=c10d", "--rdzv-endpoint="+ep, "--grace", "30s", "control")
	if r.code != 0 || !strings.Contains(r.stdout, "stop requested for job control") {
		t.Fatalf("gorun stop: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for i, n := range nodes {
		waitFor(t, fmt.Sprintf("node %d to learn of the stop request", i), func() bool {
			return strings.Contains(n.stderr.String(), "asked to stop (gorun stop): telling the workers; they have 30s")
		})
	}
	if err := os.WriteFile(filepath.Join(dir, "control", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	preemptWaitAll(t, "the stopped control job", nodes, preemptExit)
	for r := range 2 {
		if seen, _ := os.ReadFile(filepath.Join(dir, "control", "seen."+strconv.Itoa(r))); string(seen) != "stop\n" {
			t.Errorf("control: rank %d did not see the stop file: %q", r, seen)
		}
	}
}
