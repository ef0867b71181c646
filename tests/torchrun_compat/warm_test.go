package torchrun_compat

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// warmFlags start the workers in warm interpreters that imported a module
// the scripts never import themselves (introspect.py looks for it).
var warmFlags = []string{"--warm-start", "--warm-imports=xml.dom.minidom"}

// runVolatile are the worker variables whose values differ from one
// launch to the next whatever the start (ports, the run's folders,
// secrets).
var runVolatile = map[string]bool{
	"MASTER_PORT": true, "TORCHELASTIC_ERROR_FILE": true, "GORUN_JOB_SECRET": true, "GORUN_FR_DUMP_DIR": true,
	"GORUN_PROGRESS_FILE": true, "GORUN_STOP_FILE": true, "GORUN_STORE_ENDPOINTS": true, "GORUN_STORE_PREFIX": true,
	"GORUN_STORE_USER": true, "GORUN_STORE_PASSWORD": true,
	// The worker probe's: its folder and files are each run's, and the
	// owner is the worker's pid.
	"PYTHONPATH": true, "GORUN_PROBE_FILE": true, "GORUN_PROBE_REQUEST": true, "GORUN_PROBE_OWNER": true,
}

// TestWarmStart: a script started in a warm interpreter (--warm-start)
// cannot tell it from a cold start, in each of the ways a worker runs (a
// script, -m, --run-path) and each way it ends (exit 0, an uncaught
// exception, sys.exit(N), KeyboardInterrupt): the same sys.argv,
// sys.orig_argv, sys.path[0], __main__, environment, signal handlers,
// open files, flags and process group, the same exit code and the same
// traceback. The only difference it is allowed to see is the module the
// warm interpreter imported. No upstream test: torchrun has no warm start.
func TestWarmStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		flags []string
		// script is the command line, with DIR for the reports' folder.
		script []string
		code   int
		env    []string
	}{
		{"script", nil, []string{script("introspect.py"), "ok", "DIR", "an argument"}, 0, nil},
		{"module", []string{"-m"}, []string{"introspect", "ok", "DIR"}, 0, nil},
		{"run-path", []string{"--run-path"}, []string{script("introspect.py"), "ok", "DIR"}, 0, nil},
		{"uncaught exception", nil, []string{script("introspect.py"), "raise", "DIR"}, 1, nil},
		{"sys.exit(7)", nil, []string{script("introspect.py"), "exit", "DIR", "7"}, 7, nil},
		{"KeyboardInterrupt", nil, []string{script("introspect.py"), "interrupt", "DIR"}, 130, nil},
		// The script's folder is not put on sys.path (a planted module
		// there would run).
		{"PYTHONSAFEPATH=1", nil, []string{script("introspect.py"), "ok", "DIR"}, 0, []string{"PYTHONSAFEPATH=1"}},
		{"PYTHONSAFEPATH=1 -m", []string{"-m"}, []string{"introspect", "ok", "DIR"}, 0, []string{"PYTHONSAFEPATH=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			outs := map[bool]outcome{}
			reports := map[bool]map[string]map[string]any{}
			// One after the other, with the same command line, HOME and
			// TMPDIR.
			dir, home, tmp := t.TempDir(), t.TempDir(), shortTempDir(t)
			var argv []string
			for _, a := range tc.script {
				argv = append(argv, strings.ReplaceAll(a, "DIR", dir))
			}
			for _, warm := range []bool{false, true} {
				args := append([]string{"--nproc-per-node=2", "--rdzv-id=warmjob"}, tc.flags...)
				if warm {
					args = append(args, warmFlags...)
				}
				outs[warm] = gorun.launch(t, job{args: args, script: argv, home: home, tmp: tmp, env: tc.env})
				if outs[warm].code != tc.code {
					t.Fatalf("warm %v: exit %d, want %d\n%s", warm, outs[warm].code, tc.code, outs[warm])
				}
				reports[warm] = warmReports(t, dir)
				if len(reports[warm]) != 2 {
					t.Fatalf("warm %v: reports %v; want ranks 0 and 1\n%s", warm, reports[warm], outs[warm])
				}
				for name := range reports[warm] {
					if err := os.Remove(filepath.Join(dir, name)); err != nil {
						t.Fatal(err)
					}
				}
			}
			for name, cold := range reports[false] {
				warm := reports[true][name]
				if cold["warm"] != false || warm["warm"] != true {
					t.Errorf("%s: the warm module imported before the script: cold %v, warm %v; want false and true", name, cold["warm"], warm["warm"])
				}
				for k, cv := range cold {
					switch k {
					case "warm", "preloaded", "pid":
					case "environ":
						diffEnv(t, name, cv.(map[string]any), warm[k].(map[string]any))
					case "path0":
						// With PYTHONSAFEPATH=1 it is PYTHONPATH's first
						// entry: the worker probe's folder, each run's own.
						if probeFolder(cv) != probeFolder(warm[k]) {
							t.Errorf("%s: %s: cold %v, warm %v", name, k, cv, warm[k])
						}
					default:
						if !reflect.DeepEqual(cv, warm[k]) {
							t.Errorf("%s: %s: cold %v, warm %v", name, k, cv, warm[k])
						}
					}
				}
			}
			// The workers' own lines (a traceback), as gorun prints them.
			if cold, warm := workerLines(outs[false].stderr), workerLines(outs[true].stderr); !reflect.DeepEqual(cold, warm) {
				t.Errorf("the workers' stderr differs:\ncold:\n%s\nwarm:\n%s", strings.Join(cold, "\n"), strings.Join(warm, "\n"))
			}
		})
	}
}

// TestWarmStartPythonsOwnMessages: what is not a source file that a
// warm interpreter can run (a syntax error, a missing file, a folder with
// __main__.py) is started cold in its place, so that the output and the
// exit code are Python's own; what a warm import set in the environment
// is set in the round's too.
func TestWarmStartPythonsOwnMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		script []string
		flags  []string
		code   int
	}{
		{"a syntax error", []string{script("syntaxerror.py")}, nil, 1},
		{"a missing script", []string{script("missing.py")}, nil, 2},
		{"a folder with __main__.py", []string{script("appdir"), "x"}, nil, 0},
		{"what an import set", []string{script("usesetsenv.py")}, []string{"--warm-imports=setsenv"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home, tmp := t.TempDir(), shortTempDir(t)
			outs := map[bool]outcome{}
			for _, warm := range []bool{false, true} {
				args := []string{"--nproc-per-node=2"}
				if warm {
					args = append(args, "--warm-start")
					args = append(args, tc.flags...)
					if tc.flags == nil {
						args = append(args, "--warm-imports=xml.dom.minidom")
					}
				}
				outs[warm] = gorun.launch(t, job{args: args, script: tc.script, home: home, tmp: tmp, env: []string{"UNSET_BY_IMPORT=there"}})
				if outs[warm].code != tc.code {
					t.Fatalf("warm %v: exit %d, want %d\n%s", warm, outs[warm].code, tc.code, outs[warm])
				}
			}
			// Each distinct line, whichever rank wrote it (the first rank
			// to fail stops the other).
			distinct := func(out string) []string {
				var lines []string
				for _, l := range workerLines(out) {
					_, l, _ = strings.Cut(l, "]:")
					lines = append(lines, l)
				}
				slices.Sort(lines)
				return slices.Compact(lines)
			}
			for _, stream := range []func(o outcome) string{func(o outcome) string { return o.stdout }, func(o outcome) string { return o.stderr }} {
				cold, warm := distinct(stream(outs[false])), distinct(stream(outs[true]))
				if !reflect.DeepEqual(cold, warm) {
					t.Errorf("the workers' lines differ:\ncold:\n%s\nwarm:\n%s", strings.Join(cold, "\n"), strings.Join(warm, "\n"))
				}
			}
			if strings.Contains(outs[true].stderr, "warm start is off") {
				t.Errorf("warm start turned off for a script that is not a source file, or for what an import set:\n%s", outs[true])
			}
		})
	}
}

// TestWarmRestart: after a worker failure the restarted workers start in
// the interpreters gorun started while the failed attempt ran; a module
// that reads a variable of the round when it is imported (RANK) turns
// warm start off, with a warning naming both, and the job runs cold; an
// import that fails does too; bad values are refused before anything
// starts; a SIGKILLed gorun leaves no interpreter behind.
func TestWarmRestart(t *testing.T) {
	t.Parallel()
	t.Run("restart", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		o := gorun.launch(t, job{args: append([]string{"--nproc-per-node=2", "--max-restarts=1"}, warmFlags...),
			script: []string{script("introspect.py"), "failonce", dir}})
		if o.code != 0 {
			t.Fatalf("exit %d\n%s", o.code, o)
		}
		reports := warmReports(t, dir)
		for _, name := range []string{"a0.r0.json", "a0.r1.json", "a1.r0.json", "a1.r1.json"} {
			if reports[name] == nil || reports[name]["warm"] != true {
				t.Errorf("%s: %v; want a warm start", name, reports[name])
			}
		}
	})
	t.Run("a warm interpreter killed before its round", func(t *testing.T) {
		t.Parallel()
		dir, tmp := t.TempDir(), shortTempDir(t)
		fail := filepath.Join(dir, "fail-now")
		r := gorun.start(t, job{args: append([]string{"--nproc-per-node=2", "--max-restarts=1"}, warmFlags...), tmp: tmp,
			script: []string{script("introspect.py"), "failwhen", dir, fail}})
		var warmPids []int
		proctest.WaitFor(t, "the next attempt's two warm interpreters", launchTimeout, func() bool {
			reports := warmReports(t, dir)
			if len(reports) < 2 {
				return false
			}
			warmPids = nil
			for _, pid := range jobProcesses(tmp) {
				cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
				if strings.Contains(string(cmdline), "_gorun_warm") && pid != int(reports["a0.r0.json"]["pid"].(float64)) &&
					pid != int(reports["a0.r1.json"]["pid"].(float64)) {
					warmPids = append(warmPids, pid)
				}
			}
			return len(warmPids) == 2
		})
		for _, pid := range warmPids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		proctest.WaitGone(t, "the killed warmPids", 30*time.Second, warmPids)
		if err := os.WriteFile(fail, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		o := r.wait(t)
		if o.code != 0 || !strings.Contains(o.stderr, "was killed by SIGKILL (exit code 137) before its round: starting the rank cold") {
			t.Fatalf("exit %d; want 0, and a warning for each killed warm interpreter\n%s", o.code, o)
		}
		reports := warmReports(t, dir)
		for _, name := range []string{"a1.r0.json", "a1.r1.json"} {
			if reports[name] == nil || reports[name]["warm"] != false {
				t.Errorf("%s: %v; want a cold start", name, reports[name])
			}
		}
	})
	// A warm interpreter still importing when its round starts gets the worker's
	// command line and environment (300 KB here, more than the socket
	// holds) once its imports are done; meanwhile gorun stops on SIGTERM
	// as for any worker (it used to wait in the write).
	for _, tc := range []struct {
		name string
		stop bool
		sig  syscall.Signal
	}{{"a slow import and a large environment", false, 0}, {"SIGTERM during a slow import", true, syscall.SIGTERM},
		{"SIGINT during a slow import", true, syscall.SIGINT}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, tmp := t.TempDir(), shortTempDir(t)
			gate := filepath.Join(dir, "gate")
			// 10 variables of 30 KiB: one string may not pass 128 KiB.
			started := filepath.Join(t.TempDir(), "importing")
			env := []string{"SLOW_IMPORT_GATE=" + gate, "SLOW_IMPORT_STARTED=" + started}
			for i := range 10 {
				env = append(env, fmt.Sprintf("LARGE%d=%s", i, strings.Repeat("x", 30<<10)))
			}
			r := gorun.start(t, job{args: []string{"--nproc-per-node=2", "--warm-start", "--warm-imports=slowimport"}, tmp: tmp,
				env: env, script: []string{script("introspect.py"), "ok", dir}})
			// (The next attempt's warmPids, started once these are handed
			// their workers, import too: 2 or more.)
			proctest.WaitFor(t, "both warmPids to be in their import", launchTimeout, func() bool {
				m, _ := filepath.Glob(started + ".*")
				return len(m) >= 2
			})
			if tc.stop {
				// The warmPids are handed their workers, which wait for the
				// import: a stop ends them as it would cold workers in
				// their imports (a KeyboardInterrupt in an import is no
				// failed import, and the script never runs).
				if err := r.cmd.Process.Signal(tc.sig); err != nil {
					t.Fatal(err)
				}
				o := r.wait(t)
				if o.code != 128+int(tc.sig) || strings.Contains(o.stderr, "failed") || len(warmReports(t, dir)) != 0 {
					t.Errorf("exit %d after %v, reports %v; want %d, no failed import, no script run\n%s", o.code, tc.sig, warmReports(t, dir), 128+int(tc.sig), o)
				}
				proctest.WaitFor(t, "every process of the job to end", 30*time.Second, func() bool { return len(jobProcesses(tmp)) == 0 })
				return
			}
			if err := os.WriteFile(gate, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if o := r.wait(t); o.code != 0 {
				t.Fatalf("exit %d\n%s", o.code, o)
			}
			reports := warmReports(t, dir)
			if len(reports) != 2 {
				t.Fatalf("reports %v; want ranks 0 and 1", reports)
			}
			for name, report := range reports {
				if !reflect.DeepEqual(report["preloaded"], []any{"slowimport"}) {
					t.Errorf("%s: modules imported before the script: %v; want slowimport (a warm start)", name, report["preloaded"])
				}
				env := report["environ"].(map[string]any)
				for i := range 10 {
					if v, _ := env[fmt.Sprintf("LARGE%d", i)].(string); len(v) != 30<<10 {
						t.Errorf("%s: LARGE%d has %d bytes, want %d", name, i, len(v), 30<<10)
					}
				}
			}
		})
	}
	t.Run("torch's @record", func(t *testing.T) {
		t.Parallel()
		needTorch(t)
		o := gorun.launch(t, job{args: []string{"--nproc-per-node=2", "--warm-start"}, script: []string{script("recorded.py")}})
		if o.code != 1 {
			t.Errorf("exit %d; want 1 (rank 1's)\n%s", o.code, o)
		}
		// Rank 1's line: it ran the script and failed. Rank 0 may be
		// stopped for that failure before its script printed.
		if want := "[default1]:torch preloaded: True"; !strings.Contains(o.stdout, want) {
			t.Errorf("no %q: rank 1 did not start warm\n%s", want, o)
		}
		if strings.Contains(o.stdout, "torch preloaded: False") {
			t.Errorf("a rank did not start warm\n%s", o)
		}
		if !strings.Contains(o.stderr, "message   : RuntimeError: recorded failure from rank 1") {
			t.Errorf("the summary does not show the message of rank 1's error file\n%s", o)
		}
	})
	t.Run("an import reads RANK", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		o := gorun.launch(t, job{args: []string{"--nproc-per-node=2", "--warm-start", "--warm-imports=readsrank"},
			script: []string{script("introspect.py"), "ok", dir}})
		if o.code != 0 {
			t.Fatalf("exit %d\n%s", o.code, o)
		}
		for _, want := range []string{"started cold: importing readsrank read RANK, which this round sets", "warm start is off for this job"} {
			if !strings.Contains(o.stderr, want) {
				t.Errorf("no %q in gorun's warning\n%s", want, o)
			}
		}
		for name, report := range warmReports(t, dir) {
			if pre := report["preloaded"]; !reflect.DeepEqual(pre, []any{}) {
				t.Errorf("%s: modules imported before the script: %v; want none (a cold start)", name, pre)
			}
		}
	})
	t.Run("an import reads the job's secret", func(t *testing.T) {
		t.Parallel()
		o := gorun.launch(t, job{args: []string{"--nproc-per-node=2", "--warm-start", "--warm-imports=readssecret"},
			script: []string{script("introspect.py"), "ok", t.TempDir()}})
		if o.code != 0 || !strings.Contains(o.stderr, "importing readssecret read GORUN_JOB_SECRET, which this round sets") {
			t.Fatalf("exit %d; want 0 and a warning naming the variable\n%s", o.code, o)
		}
		if m := regexp.MustCompile(`[0-9a-f]{64}`).FindString(o.stderr); m != "" {
			t.Errorf("gorun's output shows the secret %s\n%s", m, o)
		}
	})
	for _, tc := range []struct{ module, want string }{
		{"raiseswithvalue", "import raiseswithvalue failed: ValueError;"},
		{"reprsenv", "importing reprsenv went through the whole environment, which every round changes"},
	} {
		t.Run("import of "+tc.module, func(t *testing.T) {
			t.Parallel()
			o := gorun.launch(t, job{args: []string{"--nproc-per-node=2", "--warm-start", "--warm-imports=" + tc.module},
				env: []string{"WARM_TEST_VALUE=s3cr3t-value"}, script: []string{script("introspect.py"), "ok", t.TempDir()}})
			if o.code != 0 || !strings.Contains(o.stderr, tc.want) || strings.Contains(o.stderr, "s3cr3t-value") {
				t.Errorf("exit %d; want 0 and %q, without the variable's value\n%s", o.code, tc.want, o)
			}
		})
	}
	t.Run("an import fails", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		o := gorun.launch(t, job{args: []string{"--nproc-per-node=2", "--warm-start", "--warm-imports=no_such_module_here"},
			script: []string{script("introspect.py"), "ok", dir}})
		if o.code != 0 || !strings.Contains(o.stderr, "import no_such_module_here failed: ModuleNotFoundError") {
			t.Fatalf("exit %d; want 0 and a warning that names the module\n%s", o.code, o)
		}
		if len(warmReports(t, dir)) != 2 {
			t.Errorf("the workers did not run cold\n%s", o)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"with --no-python", []string{"--warm-start", "--no-python"}, "--warm-start keeps Python interpreters ready, and --no-python runs"},
		{"imports without --warm-start", []string{"--warm-imports=torch"}, "add --warm-start"},
		{"not a module name", []string{"--warm-start", "--warm-imports=torch,os;rm"}, `--warm-imports: "os;rm" is not a module name`},
	} {
		t.Run("refused "+tc.name, func(t *testing.T) {
			t.Parallel()
			o := gorun.launch(t, job{args: tc.args, script: []string{script("introspect.py"), "ok", t.TempDir()}})
			if o.code != 2 || !strings.Contains(o.stderr, tc.want) {
				t.Errorf("exit %d; want 2 and %q\n%s", o.code, tc.want, o)
			}
		})
	}
	t.Run("SIGKILL leaves no interpreter", func(t *testing.T) {
		t.Parallel()
		dir, tmp := t.TempDir(), shortTempDir(t)
		r := gorun.start(t, job{args: append([]string{"--nproc-per-node=2"}, warmFlags...), tmp: tmp,
			script: []string{script("compat_worker.py"), "sleep", dir}})
		proctest.WaitFor(t, "both workers to start", launchTimeout, func() bool {
			m, _ := filepath.Glob(filepath.Join(dir, "pid.*"))
			return len(m) == 2
		})
		// The next attempt's interpreters are forked once the workers
		// are: with the workers and the store, at least 5 processes.
		proctest.WaitFor(t, "the warm interpreters to start", launchTimeout, func() bool { return len(jobProcesses(tmp)) >= 5 })
		r.cmd.Process.Kill()
		r.wait(t)
		proctest.WaitFor(t, "every process of the killed gorun's job to end", 30*time.Second, func() bool {
			return len(jobProcesses(tmp)) == 0
		})
	})
}

// warmReports reads the JSON reports introspect.py wrote in dir, by file name.
func warmReports(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	return workerReports[any](t, dir)
}

// diffEnv reports the variables of a warm worker's environment that are
// missing, added or different from the cold one's, but runVolatile's.
func diffEnv(t *testing.T, name string, cold, warm map[string]any) {
	t.Helper()
	for k, v := range cold {
		if w, ok := warm[k]; !ok || (w != v && !runVolatile[k]) {
			t.Errorf("%s: %s: cold %q, warm %q (set: %v)", name, k, v, w, ok)
		}
	}
	for k, w := range warm {
		if _, ok := cold[k]; !ok {
			t.Errorf("%s: %s=%q only in the warm worker's environment", name, k, w)
		}
	}
}

// workerLines are the lines of a gorun output that its workers wrote (with
// their [role rank] prefix).
func workerLines(out string) []string {
	var lines []string
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(l, "[default") {
			lines = append(lines, l)
		}
	}
	return lines
}

// jobProcesses are the processes whose TMPDIR is tmp: the launch's.
func jobProcesses(tmp string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid := 0
		for _, c := range e.Name() {
			if c < '0' || c > '9' {
				pid = -1
				break
			}
			pid = pid*10 + int(c-'0')
		}
		if pid <= 0 {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for kv := range strings.SplitSeq(string(data), "\x00") {
			if kv == "TMPDIR="+tmp {
				if syscall.Kill(pid, 0) == nil {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}

// probeFolder spells a path with the worker probe's per-run folder
// (gorun-python-<random>) made alike.
func probeFolder(v any) string {
	s, _ := v.(string)
	return regexp.MustCompile(`gorun-python-[0-9]+`).ReplaceAllString(s, "gorun-python-*")
}
