package torchrun_compat

import (
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

// torch2Only skips torchrun's half of a case on a flag that torchrun 1.13
// does not have.
func torch2Only(t *testing.T, l launcher) {
	t.Helper()
	if l == torchrun && torchMajor() < 2 {
		t.Skipf("torchrun %s has no such flag (2.x's)", torchVersion)
	}
}

// TestDuplicateFilters: torchrun 2.x's --duplicate-stdout-filters and
// --duplicate-stderr-filters (multiprocessing's duplicate filters): the
// teed lines that hold a filter, prefixed as on the console, in
// attempt_0/filtered_stdout.log and filtered_stderr.log, one file for all
// ranks; only the ranks --local-ranks-filter shows; ",," is a comma.
func TestDuplicateFilters(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, l launcher) {
		torch2Only(t, l)
		id, base := runID(), t.TempDir()
		o := l.launch(t, job{args: []string{"--nproc-per-node=3", "--rdzv-id=" + id, "--tee=3", "--log-dir=" + base,
			"--local-ranks-filter=0,2", "--duplicate-stdout-filters=from 0,from 1,,x,from 2", "--duplicate-stderr-filters=stderr from 2"},
			script: []string{script("compat_worker.py"), "echo", "unused"}})
		if o.code != 0 {
			t.Fatalf("exit %d; want 0\n%s", o.code, o)
		}
		run := runFolder(t, base, id, o)
		lines := func(name string) []string {
			data, err := os.ReadFile(filepath.Join(run, "attempt_0", name))
			if err != nil {
				t.Fatalf("%v\n%s", err, o)
			}
			got := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			slices.Sort(got)
			return got
		}
		if got, want := lines("filtered_stdout.log"), []string{"[default0]:hello stdout from 0", "[default2]:hello stdout from 2"}; !slices.Equal(got, want) {
			t.Errorf("filtered_stdout.log: %q; want %q", got, want)
		}
		if got, want := lines("filtered_stderr.log"), []string{"[default2]:hello stderr from 2"}; !slices.Equal(got, want) {
			t.Errorf("filtered_stderr.log: %q; want %q", got, want)
		}
	})
}

// TestVirtualLocalRank: torchrun 2.x's --virtual-local-rank
// (local_elastic_agent's virtual local rank mode): every worker has
// LOCAL_RANK=0 and only its own GPU, the local rank's entry of the
// launcher's CUDA_VISIBLE_DEVICES; with too few entries gorun refuses the
// launch before any worker starts (exit 2) and torchrun fails it.
func TestVirtualLocalRank(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, l launcher) {
		torch2Only(t, l)
		dir := t.TempDir()
		o := l.launch(t, job{args: []string{"--nproc-per-node=2", "--virtual-local-rank"}, env: []string{"CUDA_VISIBLE_DEVICES=3,5"},
			script: []string{script("compat_worker.py"), "env", dir}})
		if o.code != 0 {
			t.Fatalf("exit %d; want 0\n%s", o.code, o)
		}
		reports := dumps(t, dir)
		for r, gpu := range []string{"3", "5"} {
			report := reports["a0.r"+strconv.Itoa(r)+".json"]
			if report["LOCAL_RANK"] != "0" || report["CUDA_VISIBLE_DEVICES"] != gpu || report["RANK"] != strconv.Itoa(r) {
				t.Errorf("rank %d: LOCAL_RANK=%q CUDA_VISIBLE_DEVICES=%q RANK=%q; want 0, %s, %d", r, report["LOCAL_RANK"], report["CUDA_VISIBLE_DEVICES"], report["RANK"], gpu, r)
			}
		}

		o = l.launch(t, job{args: []string{"--nproc-per-node=2", "--virtual-local-rank"}, env: []string{"CUDA_VISIBLE_DEVICES=3"},
			script: []string{script("compat_worker.py"), "env", t.TempDir()}})
		if l == gorun {
			if o.code != 2 || !strings.Contains(o.stderr, `local rank 1 has no GPU in CUDA_VISIBLE_DEVICES="3"`) {
				t.Errorf("exit %d; want 2 naming the variable\n%s", o.code, o)
			}
		} else if o.code == 0 || !strings.Contains(o.stderr, "local_rank 1 exceeds available GPUs in CUDA_VISIBLE_DEVICES=3") {
			t.Errorf("exit %d; want a failure naming the variable\n%s", o.code, o)
		}
	})
}

// TestShutdownTimeout: torchrun 2.x's --shutdown-timeout (gorun's
// --stop-timeout under torchrun's name): a worker that ignores the stop
// signal gets SIGKILL that many seconds after the launcher stops the
// workers, not after the default 30 s. torchrun 2.x applies it when the
// launcher itself is stopped by a signal (here SIGINT); when a worker
// fails it still waits 30 s (its multiprocessing closes with the
// default), gorun the flag's time (docs/launcher.md).
func TestShutdownTimeout(t *testing.T) {
	t.Parallel()
	t.Run("launcher_signalled", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			torch2Only(t, l)
			dir := t.TempDir()
			r := l.start(t, job{args: []string{"--nproc-per-node=2", "--shutdown-timeout=1"},
				script: []string{script("compat_worker.py"), "stubborn", dir, "sleep"}})
			waitFile(t, r, filepath.Join(dir, "ready"))
			sent := time.Now()
			if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			o := r.wait(t)
			// 1 s of grace, then SIGKILL; 30 s would be the default's.
			if took := time.Since(sent); took > 15*time.Second {
				t.Errorf("the launcher ended %v after SIGINT; want about 1 s (--shutdown-timeout=1)\n%s", took, o)
			}
		})
	})
	t.Run("worker_failed", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			if l == torchrun {
				t.Skip("torchrun 2.x stops the other workers of a failed one with its default 30 s, whatever --shutdown-timeout says")
			}
			dir := t.TempDir()
			o := l.launch(t, job{args: []string{"--nproc-per-node=2", "--shutdown-timeout=1"},
				script: []string{script("compat_worker.py"), "stubborn", dir, "fail"}})
			end := time.Now()
			if o.code != l.failureCode(1) {
				t.Fatalf("exit %d; want %d\n%s", o.code, l.failureCode(1), o)
			}
			data, err := os.ReadFile(filepath.Join(dir, "failed_at"))
			if err != nil {
				t.Fatal(err)
			}
			at, err := strconv.ParseFloat(string(data), 64)
			if err != nil {
				t.Fatal(err)
			}
			if took := end.Sub(time.UnixMicro(int64(at * 1e6))); took > 15*time.Second {
				t.Errorf("the launcher ended %v after the failure; want about 1 s (--shutdown-timeout=1)\n%s", took, o)
			}
		})
	})
}

// waitFile waits for path to appear while the launch r runs.
func waitFile(t *testing.T, r *running, path string) {
	t.Helper()
	deadline := time.Now().Add(launchTimeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-r.done:
			t.Fatalf("%s ended before %s appeared\n%s", r.description, path, r.result)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear in %v", path, launchTimeout)
		}
	}
}

// TestBadFlagValues: run_test.test_min_max_nodes_parse and the other argument
// errors of torchrun 2.x's config_from_args, StdTest.test_from_str_bad_input,
// test_invalid_log_dir and shutdown_timeout_test's negative timeout: each
// launch is refused before any worker runs, with a message that names the
// flag. torchrun exits 1 (2 for argparse's choices), gorun 2, as for all
// bad input (docs/launcher.md).
func TestBadFlagValues(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		args    []string
		torch2  bool   // a flag of torchrun 2.x only
		gorun   string // gorun's message holds this
		torchrn string // torchrun's holds this
	}{
		{"run_test.test_min_max_nodes_parse(2:20:30)", []string{"--nnodes=2:20:30"}, false, `--nnodes="2:20:30"`, "2:20:30"},
		{"config_from_args(min>max)", []string{"--nnodes=3:2"}, false, `--nnodes="3:2"`, "min_nodes"},
		{"config_from_args(max_restarts<0)", []string{"--max-restarts=-1"}, false, "--max-restarts", "max_restarts"},
		{"config_from_args(local_ranks_filter)", []string{"--local-ranks-filter=a,b"}, true, "--local-ranks-filter", "local_ranks_filter"},
		{"StdTest.test_from_str_bad_input(redirects)", []string{"--redirects=0:1,1"}, false, "--redirects", "0:1,1"},
		{"StdTest.test_from_str_bad_input(tee)", []string{"--tee=5"}, false, "--tee", "5"},
		{"test_invalid_log_dir", []string{"--log-dir=" + file}, false, "--log-dir", "is a file"},
		{"shutdown_timeout_test(negative)", []string{"--shutdown-timeout=-1"}, true, `--shutdown-timeout="-1"`, "shutdown_timeout must be non-negative"},
		{"numa_binding(choices)", []string{"--numa-binding=bogus"}, true, `--numa-binding="bogus"`, "invalid choice: 'bogus'"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			both(t, func(t *testing.T, l launcher) {
				if tt.torch2 {
					torch2Only(t, l)
				}
				dir := t.TempDir()
				o := l.launch(t, job{args: append([]string{"--nproc-per-node=2"}, tt.args...),
					script: []string{script("compat_worker.py"), "touch", dir}})
				want, text := 2, tt.gorun
				if l == torchrun {
					want, text = 1, tt.torchrn
					if strings.Contains(tt.torchrn, "invalid choice") {
						want = 2
					}
					if torchMajor() < 2 {
						text = "" // 1.13's words differ; its refusal is the point
					}
				}
				if o.code != want || !strings.Contains(o.stderr, text) {
					t.Errorf("exit %d; want %d with %q\n%s", o.code, want, text, o)
				}
				wantTouched(t, dir, 0, o)
			})
		})
	}
}

// TestDefaultRunID: torchrun 2.x's run(): a single-node launch with the
// static backend, no endpoint and no master port runs as --standalone
// does, under a fresh run id (a UUID) for every launch; with --rdzv-id
// gorun keeps the id given (torchrun 2.x replaces it; docs/launcher.md).
func TestDefaultRunID(t *testing.T) {
	t.Parallel()
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	both(t, func(t *testing.T, l launcher) {
		torch2Only(t, l)
		var ids []string
		for range 2 {
			dir := t.TempDir()
			if o := l.launch(t, job{bare: true, args: []string{"--nproc-per-node=2"}, script: []string{script("compat_worker.py"), "env", dir}}); o.code != 0 {
				t.Fatalf("exit %d\n%s", o.code, o)
			}
			reports := dumps(t, dir)
			id := reports["a0.r0.json"]["TORCHELASTIC_RUN_ID"]
			if !uuid.MatchString(id) || reports["a0.r1.json"]["TORCHELASTIC_RUN_ID"] != id {
				t.Errorf("TORCHELASTIC_RUN_ID %q and %q; want one UUID for both ranks", id, reports["a0.r1.json"]["TORCHELASTIC_RUN_ID"])
			}
			ids = append(ids, id)
		}
		if ids[0] == ids[1] {
			t.Errorf("two launches share the run id %s; want a fresh one each", ids[0])
		}
		if l == torchrun {
			return
		}
		dir := t.TempDir()
		if o := l.launch(t, job{bare: true, args: []string{"--nproc-per-node=1", "--rdzv-id=mine"}, script: []string{script("compat_worker.py"), "env", dir}}); o.code != 0 {
			t.Fatalf("exit %d\n%s", o.code, o)
		}
		if id := dumps(t, dir)["a0.r0.json"]["TORCHELASTIC_RUN_ID"]; id != "mine" {
			t.Errorf("with --rdzv-id=mine: TORCHELASTIC_RUN_ID=%q", id)
		}
	})
}

// TestLocalRanksFilterBeyondTheNode: run.py's --local-ranks-filter takes
// local ranks this node does not have (one launch line serves nodes of
// different sizes): the launch runs, and shows only the ranks it has.
func TestLocalRanksFilterBeyondTheNode(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, l launcher) {
		torch2Only(t, l)
		o := l.launch(t, job{args: []string{"--nproc-per-node=2", "--local-ranks-filter=1,5"}, script: []string{script("compat_worker.py"), "echo", "unused"}})
		if o.code != 0 {
			t.Fatalf("exit %d; want 0\n%s", o.code, o)
		}
		if !strings.Contains(o.stdout, "hello stdout from 1") || strings.Contains(o.stdout, "hello stdout from 0") {
			t.Errorf("want local rank 1's output alone on the console\n%s", o)
		}
	})
}

// TestFileTimer: local_elastic_agent_test's run_agent_local_watchdog_setup
// and the file timer it serves: with TORCHELASTIC_ENABLE_FILE_TIMER=1 the
// workers get TORCHELASTIC_TIMER_FILE, and a worker whose
// torch.distributed.elastic.timer scope overruns is reaped (SIGKILL) well
// before it would have ended. torchrun 2.x then kills its own agent with
// the same signal (exit 137, leaving rank 0 to end by itself); gorun
// stops the other workers as for any failure and exits with the reaped
// worker's code, 137, saying whose timer expired.
func TestFileTimer(t *testing.T) {
	t.Parallel()
	needTorch(t)
	both(t, func(t *testing.T, l launcher) {
		torch2Only(t, l)
		o := l.launch(t, job{args: []string{"--nproc-per-node=2"}, env: []string{"TORCHELASTIC_ENABLE_FILE_TIMER=1"},
			script: []string{script("compat_worker.py"), "timer", "unused"}})
		if o.code != 137 {
			t.Errorf("exit %d; want 137 (SIGKILL)\n%s", o.code, o)
		}
		if l == gorun && !strings.Contains(o.stderr, `its timer "stuck" expired`) {
			t.Errorf("gorun does not say whose timer expired\n%s", o)
		}
	})
}

// TestExitTogether: local_elastic_agent_test's workers_drift_success and
// test_no_exit_barrier_on_failure, two agents of one c10d job. When one
// node's workers finish 8 s before the other's, both agents end together
// (torchrun 2.x: its exit barrier); when odd ranks fail, both agents end
// with a failure, gorun's at once, not after the even ranks' 20 s.
func TestExitTogether(t *testing.T) {
	t.Parallel()
	t.Run("local_elastic_agent_test.workers_drift_success", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			ep, id := strconv.Itoa(freePort(t)), runID()
			j := job{args: c10dArgs("2", ep, id, "--nproc-per-node=1"), script: []string{script("compat_worker.py"), "drift", "unused"}}
			start := time.Now()
			outs := launchAgents(t, l, []job{j, j})
			allExit(t, outs, 0)
			// Each agent's end, from the common start.
			var ends []time.Duration
			for _, o := range outs {
				ends = append(ends, o.elapsed)
			}
			if d := ends[0] - ends[1]; d > 3*time.Second || d < -3*time.Second || time.Since(start) < 8*time.Second {
				t.Errorf("the agents ended %v and %v after their starts; want both after the slower node's 8 s, together", ends[0], ends[1])
			}
		})
	})
	t.Run("local_elastic_agent_test.test_no_exit_barrier_on_failure", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			ep, id := strconv.Itoa(freePort(t)), runID()
			j := job{args: c10dArgs("2", ep, id, "--nproc-per-node=2", "--max-restarts=0"), script: []string{script("compat_worker.py"), "oddfail", "unused"}}
			outs := launchAgents(t, l, []job{j, j})
			for i, o := range outs {
				// torchrun's agents took 6 s here idle, 27-31 s under a
				// loaded suite (its stop of the other node's workers):
				// for it the failure alone is checked.
				if o.code == 0 || (l == gorun && o.elapsed >= 20*time.Second) {
					t.Errorf("agent %d: exit %d after %v; want a failure before the even ranks' 20 s\n%s", i, o.code, o.elapsed, o)
				}
			}
		})
	})
}
