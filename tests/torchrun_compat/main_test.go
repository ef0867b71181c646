// Package torchrun_compat runs gorun and torchrun on the cases PyTorch's
// own launcher tests check (test/distributed/launcher/test_run.py, formerly
// run_test.py, launcher/api_test.py and the command-line parts of
// elastic/agent/server/test/local_elastic_agent_test.py), written anew from
// what each upstream test checks. Each case names the upstream test it
// mirrors and runs both launchers as subprocesses, gorun always and
// torchrun where the tests' interpreter imports torch: subtests CASE/gorun
// and CASE/torchrun. The interpreter is internal/testkit/torchpy's choice:
// PyTorch 2.x, the reference, from tests/torch2's environment; make test
// runs the cases a second time on Debian's 1.13 (GORUN_TEST_PYTHON), the
// oldest version gorun supports. Each launcher is held to its own
// documented behaviour where the two differ on purpose (docs/launcher.md:
// gorun exits with the worker's code where torchrun exits 1, and bad input
// is 2). Cases that need a torch newer than 1.13 run gorun only and say so.
package torchrun_compat

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	// python runs the workers and torchrun.
	python string
	// torchVersion is python's torch.__version__.
	torchVersion string
	// torchrunMissing says why torchrun cannot run here ("" if it can).
	torchrunMissing string
	// testdata is the absolute path of the worker scripts.
	testdata string
	// pythonCPUs is Python's os.cpu_count(), torchrun's "cpu".
	pythonCPUs int
	// torchGPUs is torch.cuda.device_count(), torchrun's "gpu".
	torchGPUs int
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The cases mostly wait: on rendezvous, on Python starting.
	proctest.RunMostlyWaiting(8)
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
	choice := torchpy.Find("../..")
	python, torchVersion = choice.Python, choice.Torch
	fmt.Fprintln(os.Stderr, "torchrun_compat: workers and torchrun run on", choice)
	out, err := exec.Command(python, "-c", "import os; print(os.cpu_count())").Output()
	if _, serr := fmt.Sscan(string(out), &pythonCPUs); err != nil || serr != nil {
		fmt.Fprintln(os.Stderr, "os.cpu_count():", err, serr)
		return 1
	}
	if choice.Missing == "" {
		out, err = exec.Command(python, "-c", "import torch; print(torch.cuda.device_count())").CombinedOutput()
		if _, serr := fmt.Sscan(lastLine(string(out)), &torchGPUs); err != nil || serr != nil {
			choice.Missing = fmt.Sprintf("torch.cuda.device_count(): %v %v: %s", err, serr, out)
		}
	}
	if choice.Missing != "" {
		torchrunMissing = python + ": " + choice.Missing
		if os.Getenv("GORUN_REQUIRE_TORCH") == "1" {
			fmt.Fprintln(os.Stderr, "torchrun_compat: GORUN_REQUIRE_TORCH=1 and", torchrunMissing)
			return 1
		}
		fmt.Fprintf(os.Stderr, "torchrun_compat: TORCHRUN NOT INSTALLED, its half of every case is skipped: %s\n", torchrunMissing)
	}
	return m.Run()
}

// launcher is gorun or torchrun.
type launcher string

const (
	gorun    launcher = "gorun"
	torchrun launcher = "torchrun"
)

// both runs body as the subtests gorun and torchrun of t, in parallel;
// torchrun's is skipped, loudly, where torch is not installed.
func both(t *testing.T, body func(t *testing.T, l launcher)) {
	t.Helper()
	for _, l := range []launcher{gorun, torchrun} {
		t.Run(string(l), func(t *testing.T) {
			t.Parallel()
			if l == torchrun && torchrunMissing != "" {
				t.Skip("TORCHRUN NOT INSTALLED: " + torchrunMissing)
			}
			body(t, l)
		})
	}
}

// needTorch skips a case whose workers import torch where torch is missing.
func needTorch(t *testing.T) {
	t.Helper()
	if torchrunMissing != "" {
		t.Skip("TORCH NOT INSTALLED, the workers need it: " + torchrunMissing)
	}
}

// job is one launch: the launcher's flags as upstream's tests spell them
// (main's dash spelling; torchrun 1.13 gets its underscore spelling unless
// asIs), the script and its arguments, and additions to the environment.
type job struct {
	args   []string
	script []string
	env    []string
	stdin  string
	home   string // HOME, shared by the agents of one multi-node job; "" for a new one
	tmp    string // TMPDIR; "" for a new one
	asIs   bool   // give torchrun the flags exactly as written
	bare   bool   // no PET_MASTER_PORT for torchrun: its own default rendezvous
}

// outcome is a finished launch.
type outcome struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

func (o outcome) String() string {
	return fmt.Sprintf("exit %d after %v\n--- stdout:\n%s--- stderr:\n%s", o.code, o.elapsed.Round(time.Millisecond), o.stdout, o.stderr)
}

// launchTimeout bounds one launch: the machine has 2 cores and others run
// their tests on it too.
const launchTimeout = 3 * time.Minute

// cleanEnv is this process's environment without what would change a
// launch's shape or defaults (proctest.GorunEnv's list, plus torchrun's
// worker variables), and with HOME and TMPDIR of the test's own.
func cleanEnv(t *testing.T, home, tmp string) []string {
	env := proctest.GorunEnv("HOME", "TMPDIR", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING", "PYTHONPATH",
		"RANK", "LOCAL_RANK", "WORLD_SIZE")
	if home == "" {
		home = t.TempDir()
	}
	if tmp == "" {
		tmp = shortTempDir(t)
	}
	return append(env, "HOME="+home, "TMPDIR="+tmp, "PYTHON_EXEC="+python, "PYTHONDONTWRITEBYTECODE=1",
		"PYTHONPATH="+testdata, "TEST_SENTINEL_PARENT=FOOBAR")
}

// shortTempDir is a new folder removed at the end of the test, with a
// short path: a TMPDIR of t.TempDir()'s length (which holds the test's
// name) makes Unix socket paths in it longer than the kernel's 108 bytes.
func shortTempDir(t *testing.T) string { return proctest.ShortTempDir(t, "tc-") }

// underscored is a flag in torchrun 1.13's spelling: --nproc-per-node=2
// becomes --nproc_per_node=2.
func underscored(arg string) string {
	if !strings.HasPrefix(arg, "--") {
		return arg
	}
	name, value, hasValue := strings.Cut(arg[2:], "=")
	arg = "--" + strings.ReplaceAll(name, "-", "_")
	if hasValue {
		arg += "=" + value
	}
	return arg
}

// command is the launch of j by l.
func (l launcher) command(t *testing.T, j job) *exec.Cmd {
	t.Helper()
	env := cleanEnv(t, j.home, j.tmp)
	var argv []string
	if l == gorun {
		argv = append([]string{gorunBin}, j.args...)
	} else {
		argv = []string{python, filepath.Join(testdata, "torchrun.py")}
		for _, a := range j.args {
			if !j.asIs {
				a = underscored(a)
			}
			argv = append(argv, a)
		}
		// main's monitor interval (1.13 polls every 5 s); a free master
		// port for 1.13's static agent store, which would otherwise
		// bind 29500 (any other job here may hold it). The case's own
		// flags and variables come after and win.
		env = append(env, "PET_MONITOR_INTERVAL=0.1")
		if !j.bare && !hasFlag(j.args, "rdzv-backend") && !hasFlag(j.args, "standalone") {
			env = append(env, fmt.Sprintf("PET_MASTER_PORT=%d", freePort(t)))
		}
	}
	argv = append(argv, j.script...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(env, j.env...)
	if j.stdin != "" {
		cmd.Stdin = strings.NewReader(j.stdin)
	}
	return cmd
}

// hasFlag says whether args hold --name in either spelling.
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a, _, _ = strings.Cut(a, "=")
		if a == "--"+name || a == "--"+strings.ReplaceAll(name, "-", "_") {
			return true
		}
	}
	return false
}

// running is a launch in progress.
type running struct {
	cmd         *exec.Cmd
	out, errb   *proctest.Buffer
	start       time.Time
	done        chan struct{}
	result      outcome
	waitErr     error
	description string
}

// start starts j with l; the launch is killed at the end of the test if
// it still runs.
func (l launcher) start(t *testing.T, j job) *running {
	t.Helper()
	r := &running{cmd: l.command(t, j), out: &proctest.Buffer{}, errb: &proctest.Buffer{}, done: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.errb
	// A launcher's workers that outlive it (torchrun's, when it is
	// killed) hold its output open: stop reading 3 s after it exits.
	r.cmd.WaitDelay = 3 * time.Second
	r.description = fmt.Sprintf("%s %q", l, r.cmd.Args[1:])
	r.start = time.Now()
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", r.description, err)
	}
	go func() {
		err := r.cmd.Wait()
		code := 0
		var ee *exec.ExitError
		switch {
		case errors.Is(err, exec.ErrWaitDelay):
			// Exited, but something it left (torchrun's orphans) holds
			// its output open.
			code = r.cmd.ProcessState.ExitCode()
			if ws, ok := r.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		case errors.As(err, &ee):
			code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal()) // as a shell reports it
			}
		case err != nil:
			r.waitErr = err
		}
		r.result = outcome{code: code, stdout: r.out.String(), stderr: r.errb.String(), elapsed: time.Since(r.start)}
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
		t.Fatalf("%s still running after %v; killed\n%s", r.description, launchTimeout, r.result)
	}
	if r.waitErr != nil {
		t.Fatalf("%s: %v", r.description, r.waitErr)
	}
	t.Logf("%s: exit %d in %v", r.description, r.result.code, r.result.elapsed.Round(time.Millisecond))
	return r.result
}

// launch runs j with l to its end.
func (l launcher) launch(t *testing.T, j job) outcome {
	t.Helper()
	return l.start(t, j).wait(t)
}

// failureCode is the exit code l documents for a job whose worker failed
// with code: torchrun's is always 1, gorun's the worker's own.
func (l launcher) failureCode(code int) int {
	if l == torchrun {
		return 1
	}
	return code
}

// freePort is a TCP port the kernel reports free on 127.0.0.1.
func freePort(t *testing.T) int { return proctest.FreePort(t, "127.0.0.1") }

// torchMajor is the major version of the tests' torch: 1 (Debian's
// 1.13) or 2 (the reference); 0 where torch is missing.
func torchMajor() int {
	n, _ := strconv.Atoi(strings.SplitN(torchVersion, ".", 2)[0])
	return n
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// fileNames lists the files in dir, sorted.
func fileNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// rankNames is "0", "1", ..., n-1 as sorted file names.
func rankNames(n int) []string {
	var names []string
	for i := range n {
		names = append(names, fmt.Sprint(i))
	}
	slices.Sort(names)
	return names
}

// wantTouched checks that exactly the global ranks 0..n-1 touched their
// file in dir, as upstream's tests check the folder their workers touch.
func wantTouched(t *testing.T, dir string, n int, o outcome) {
	t.Helper()
	if got, want := fileNames(t, dir), rankNames(n); !slices.Equal(got, want) {
		t.Errorf("workers that ran (files in the touch folder): %v; want %v\n%s", got, want, o)
	}
}

// dumps reads the worker reports (JSON objects of strings) in dir, by
// file name.
func dumps(t *testing.T, dir string) map[string]map[string]string {
	t.Helper()
	return workerReports[string](t, dir)
}

// workerReports reads the JSON objects in dir's *.json files, by file name.
func workerReports[V any](t *testing.T, dir string) map[string]map[string]V {
	t.Helper()
	reports := map[string]map[string]V{}
	for _, name := range fileNames(t, dir) {
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		report := map[string]V{}
		if err := json.Unmarshal(data, &report); err != nil {
			t.Fatalf("%s: %v: %s", name, err, data)
		}
		reports[name] = report
	}
	return reports
}

// workerLines are the console lines of the workers' output that end with
// text, whatever prefix a launcher put before them.
func linesEnding(out, text string) []string {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasSuffix(l, text) {
			got = append(got, l)
		}
	}
	return got
}

// script is the path of a testdata script.
func script(name string) string { return filepath.Join(testdata, name) }

// runID is a fresh run id, as upstream's str(uuid.uuid4().int).
func runID() string { return fmt.Sprint(time.Now().UnixNano()) }
