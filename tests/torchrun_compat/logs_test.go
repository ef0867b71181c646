package torchrun_compat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runFolder is the one run folder <run_id>_<random> in base, as torchrun's
// DefaultLogsSpecs makes it (docs/sources.md, torchrun: logs).
func runFolder(t *testing.T, base, runID string, o outcome) string {
	t.Helper()
	runs, err := filepath.Glob(filepath.Join(base, runID+"_*"))
	if err != nil || len(runs) != 1 {
		entries, _ := os.ReadDir(base)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("run folders %v in %s (holding %v); want one %s_<random>\n%s", runs, base, names, runID, o)
	}
	return runs[0]
}

// logHas checks that the log file rel (attempt_0/0/stdout.log) of the run
// folder holds text.
func logHas(t *testing.T, run, rel, text string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(run, rel))
	if err != nil {
		t.Errorf("%v", err)
		return
	}
	if !strings.Contains(string(data), text) {
		t.Errorf("%s holds %q; want %q in it", rel, data, text)
	}
}

// consoleHas checks that a console line of out ends with text and starts
// with prefix ("" for any prefix).
//
// gorun writes each worker line whole; torchrun 1.13's tee threads may
// put two workers' text on one console line ("[default0]:a[default1]:b"),
// so for torchrun the prefixed text may also begin inside a line.
func consoleHas(t *testing.T, l launcher, what, out, prefix, text string) {
	t.Helper()
	for _, line := range linesEnding(out, text) {
		if strings.HasPrefix(line, prefix) {
			return
		}
	}
	// torchrun's own console interleaves: its teed lines and a worker's
	// untouched output share the console without line buffering, so a
	// line of one may run into the other's ("hello stdout from
	// 1[default0]:hello stdout from 0").
	if l == torchrun && strings.Contains(out, prefix+text) {
		return
	}
	t.Errorf("no %s line %q...%q:\n%s", what, prefix, text, out)
}

// TestLogs: --redirects and --tee, with and without --log-dir, put each
// local rank's streams in <log_dir>/<run_id>_<random>/attempt_0/<local_rank>/
// {stdout,stderr}.log, and teed lines on the console with the prefix
// [<role><local_rank>]:. Without --log-dir the base is a new temporary
// folder: torchrun's $TMPDIR/torchelastic_*, gorun's $TMPDIR/gorun-logs-*
// (docs/launcher.md). gorun prefixes every worker line (a documented
// difference); torchrun only teed ones.
func TestLogs(t *testing.T) {
	t.Parallel()
	echo := []string{script("compat_worker.py"), "echo", "unused"}
	for _, tt := range []struct {
		name   string
		args   []string
		env    []string
		logDir bool
		check  func(t *testing.T, l launcher, run string, o outcome)
	}{
		// multiprocessing/api_test.test_binary_redirect_and_tee: rank 0's
		// stderr to its file only and its stdout teed; rank 1's stderr
		// teed, its stdout left on the console.
		{"multiprocessing.api_test.test_binary_redirect_and_tee", []string{"--redirects=0:2", "--tee=0:1,1:2"}, nil, true,
			func(t *testing.T, l launcher, run string, o outcome) {
				logHas(t, run, "attempt_0/0/stdout.log", "hello stdout from 0")
				logHas(t, run, "attempt_0/0/stderr.log", "hello stderr from 0")
				logHas(t, run, "attempt_0/1/stderr.log", "hello stderr from 1")
				if data, _ := os.ReadFile(filepath.Join(run, "attempt_0/1/stdout.log")); strings.Contains(string(data), "hello") {
					t.Errorf("rank 1's stdout, not redirected, is in attempt_0/1/stdout.log: %q", data)
				}
				consoleHas(t, l, "stdout", o.stdout, "[default0]:", "hello stdout from 0")
				consoleHas(t, l, "stdout", o.stdout, "", "hello stdout from 1")
				consoleHas(t, l, "stderr", o.stderr, "[default1]:", "hello stderr from 1")
				if strings.Contains(o.stderr, "hello stderr from 0") {
					t.Errorf("rank 0's stderr, redirected and not teed, reached the console:\n%s", o.stderr)
				}
			}},
		// --redirects=3 with --log-dir: both streams of both ranks in
		// their files, none on the console.
		{"multiprocessing.api_test.test_binary_redirects(--redirects=3)", []string{"--redirects=3"}, nil, true,
			func(t *testing.T, l launcher, run string, o outcome) {
				for _, r := range []string{"0", "1"} {
					logHas(t, run, "attempt_0/"+r+"/stdout.log", "hello stdout from "+r)
					logHas(t, run, "attempt_0/"+r+"/stderr.log", "hello stderr from "+r)
				}
				if strings.Contains(o.stdout+o.stderr, "hello") {
					t.Errorf("redirected output reached the console:\n%s", o)
				}
			}},
		// run_test.test_capture_logs_using_default_logs_specs: --redirect=3
		// (argparse's prefix of --redirects) --tee=3 without --log-dir:
		// the files in a new temporary folder, and every line on the
		// console with the prefix template
		// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[rank${rank}]: ". The
		// template is newer than 1.13, whose prefix stays
		// [default<local_rank>]:; 2.x and gorun honour it.
		{"run_test.test_capture_logs_using_default_logs_specs", []string{"--redirect=3", "--tee=3"},
			[]string{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[rank${rank}]: "}, false,
			func(t *testing.T, l launcher, run string, o outcome) {
				for _, r := range []string{"0", "1"} {
					logHas(t, run, "attempt_0/"+r+"/stdout.log", "hello stdout from "+r)
					logHas(t, run, "attempt_0/"+r+"/stderr.log", "hello stderr from "+r)
					prefix := "[rank" + r + "]: "
					if l == torchrun && torchMajor() < 2 {
						prefix = "[default" + r + "]:"
					}
					consoleHas(t, l, "stdout", o.stdout, prefix, "hello stdout from "+r)
					consoleHas(t, l, "stderr", o.stderr, prefix, "hello stderr from "+r)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			both(t, func(t *testing.T, l launcher) {
				id, base, tmp := runID(), t.TempDir(), shortTempDir(t)
				args := append([]string{"--nproc-per-node=2", "--rdzv-id=" + id}, tt.args...)
				if tt.logDir {
					args = append(args, "--log-dir="+base)
				}
				o := l.launch(t, job{args: args, tmp: tmp, script: echo, env: tt.env})
				if o.code != 0 {
					t.Fatalf("exit %d; want 0\n%s", o.code, o)
				}
				if !tt.logDir {
					// torchrun: tempfile.mkdtemp(prefix="torchelastic_");
					// gorun: gorun-logs-* (docs/launcher.md).
					pattern := filepath.Join(tmp, "gorun-logs-*")
					if l == torchrun {
						pattern = filepath.Join(tmp, "torchelastic_*")
					}
					bases, _ := filepath.Glob(pattern)
					if len(bases) != 1 {
						t.Fatalf("temporary log folders %v; want one %s\n%s", bases, pattern, o)
					}
					base = bases[0]
				}
				tt.check(t, l, runFolder(t, base, id, o), o)
			})
		})
	}
}

// TestRunIDs: a run id is text: "job:42" and "my job" become
// TORCHELASTIC_RUN_ID and name the run folder <run_id>_<random> in
// --log-dir (docs/sources.md, torchrun: logs; no upstream test: upstream's ids are
// numbers). The empty role --role ” is a role: ROLE_NAME is empty and the
// prefix of a teed line is [<local_rank>]:.
func TestRunIDs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, id, role string }{
		{"torchrun_doc.run_id(job:42)", "job:42", "default"},
		{"torchrun_doc.run_id(my_job)", "my job", "default"},
		{"torchrun_doc.role('')", "roles", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			both(t, func(t *testing.T, l launcher) {
				base, dir := t.TempDir(), t.TempDir()
				args := []string{"--nproc-per-node=2", "--rdzv-id", tt.id, "--tee=3", "--log-dir", base}
				if tt.role != "default" {
					args = append(args, "--role", tt.role)
				}
				o := l.launch(t, job{args: args, script: []string{script("compat_worker.py"), "env", dir}})
				if o.code != 0 {
					t.Fatalf("exit %d; want 0\n%s", o.code, o)
				}
				for name, report := range dumps(t, dir) {
					if report["TORCHELASTIC_RUN_ID"] != tt.id || report["ROLE_NAME"] != tt.role {
						t.Errorf("%s: TORCHELASTIC_RUN_ID=%q ROLE_NAME=%q; want %q and %q", name, report["TORCHELASTIC_RUN_ID"], report["ROLE_NAME"], tt.id, tt.role)
					}
				}
				run := runFolder(t, base, tt.id, o)
				logHas(t, run, "attempt_0/1/stdout.log", "worker 1 done")
				consoleHas(t, l, "stdout", o.stdout, "["+tt.role+"1]:", "worker 1 done")
			})
		})
	}
}
