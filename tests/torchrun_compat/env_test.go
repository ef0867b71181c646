package torchrun_compat

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// gorunOnly says whether a worker variable is one that gorun adds and
// torchrun does not (docs/launcher.md, "Worker environment"): gorun's own
// GORUN_*, the memory defaults (docs/sources.md), and TORCHELASTIC_SIGNALS_TO_HANDLE,
// which torchrun 1.13 (without --signals-to-handle) lacks.
func gorunOnly(name string) bool {
	switch name {
	case "PYTORCH_CUDA_ALLOC_CONF", "MULTI_STREAM_MEMORY_REUSE", "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
		"TORCH_FR_BUFFER_SIZE": // the flight recorder that gorun's worker probe reads
		return true
	}
	return strings.HasPrefix(name, "GORUN_")
}

// TestWorkerEnv: local_elastic_agent_test.test_run_check_env_function
// (every variable a worker needs is set), with the values docs/sources.md lists (torchrun: the worker's environment),
// and gorun's whole worker environment compared with torchrun's, variable
// by variable, on the same launch: every variable torchrun's workers have
// reaches gorun's with the same value, and gorun adds only the variables
// of gorunOnly. Where they differ on purpose (docs/launcher.md) each
// launcher is held to its own value: TORCHELASTIC_USE_AGENT_STORE
// (torchrun's agent hosts the store: True; gorun's worker rank 0 does:
// False), the master port (each a free one) and the error file's folder.
// NCCL_ASYNC_ERROR_HANDLING is torch 1.x's name: torchrun 1.13 sets it
// and 2.x does not; gorun sets it where the workers' torch is 1.x.
func TestWorkerEnv(t *testing.T) {
	t.Parallel()
	t.Run("local_elastic_agent_test.test_run_check_env_function", func(t *testing.T) {
		t.Parallel()
		launchers := []launcher{gorun}
		if torchrunMissing == "" {
			launchers = append(launchers, torchrun)
		} else {
			t.Log("TORCHRUN NOT INSTALLED: gorun's values are checked alone: " + torchrunMissing)
		}
		id := "envjob"
		got := map[launcher]map[string]map[string]string{}
		var rs []*running
		dirs := map[launcher]string{}
		for _, l := range launchers {
			dirs[l] = t.TempDir()
			rs = append(rs, l.start(t, job{args: []string{"--nproc-per-node=2", "--max-restarts=2", "--rdzv-id=" + id},
				script: []string{script("compat_worker.py"), "env", dirs[l]}}))
		}
		for i, l := range launchers {
			if o := rs[i].wait(t); o.code != 0 {
				t.Fatalf("%s: exit %d\n%s", l, o.code, o)
			}
			got[l] = dumps(t, dirs[l])
		}
		for _, l := range launchers {
			if len(got[l]) != 2 {
				t.Fatalf("%s: workers %v; want ranks 0 and 1 of attempt 0", l, got[l])
			}
			for r := range 2 {
				rs := strconv.Itoa(r)
				report := got[l]["a0.r"+rs+".json"]
				want := map[string]string{
					"LOCAL_RANK": rs, "RANK": rs, "GROUP_RANK": "0", "ROLE_RANK": rs, "ROLE_NAME": "default",
					"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2", "ROLE_WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "1",
					"MASTER_ADDR": "127.0.0.1", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "2",
					"TORCHELASTIC_RUN_ID": id, "OMP_NUM_THREADS": "1",
					"TEST_SENTINEL_PARENT": "FOOBAR", "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
					"TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
				}
				if torchMajor() < 2 {
					want["NCCL_ASYNC_ERROR_HANDLING"] = "1"
				}
				if l == torchrun {
					if torchMajor() < 2 {
						// 1.13 sets only the older name and has no
						// --signals-to-handle.
						delete(want, "TORCH_NCCL_ASYNC_ERROR_HANDLING")
						delete(want, "TORCHELASTIC_SIGNALS_TO_HANDLE")
					}
				}
				for k, v := range want {
					if report[k] != v {
						t.Errorf("%s rank %d: %s=%q; want %q", l, r, k, report[k], v)
					}
				}
				if torchMajor() >= 2 {
					if v, set := report["NCCL_ASYNC_ERROR_HANDLING"]; set {
						t.Errorf("%s rank %d: NCCL_ASYNC_ERROR_HANDLING=%q; want it unset (torch 2.x warns on every rank)", l, r, v)
					}
				}
				if p, err := strconv.Atoi(report["MASTER_PORT"]); err != nil || p <= 0 || p > 65535 || report["MASTER_PORT"] != got[l]["a0.r0.json"]["MASTER_PORT"] {
					t.Errorf("%s rank %d: MASTER_PORT=%q; want a port, the same for every worker", l, r, report["MASTER_PORT"])
				}
				if f := report["TORCHELASTIC_ERROR_FILE"]; !strings.HasSuffix(f, "/attempt_0/"+rs+"/error.json") {
					t.Errorf("%s rank %d: TORCHELASTIC_ERROR_FILE=%q; want .../attempt_0/%d/error.json", l, r, f, r)
				}
			}
		}
		if len(launchers) < 2 {
			return
		}
		for name, treport := range got[torchrun] {
			greport := got[gorun][name]
			for k, tv := range treport {
				switch {
				case k == "MASTER_PORT", k == "TORCHELASTIC_ERROR_FILE":
					continue
				case k == "PYTHONPATH":
					// gorun's Python modules first, then the user's.
					if gv := greport[k]; !regexp.MustCompile(`/gorun-python-[0-9]+:`).MatchString(gv) || !strings.HasSuffix(gv, ":"+tv) {
						t.Errorf("%s: PYTHONPATH: gorun %q; want its modules' folder, then torchrun's %q", name, gv, tv)
					}
					continue
				case k == "HOME", k == "TMPDIR", strings.HasPrefix(k, "PET_"):
					// The harness's: each launch has its own
					// folders, and torchrun gets PET_ settings.
					continue
				}
				if gv, ok := greport[k]; !ok || gv != tv {
					t.Errorf("%s: %s: gorun %q (set: %v), torchrun %q", name, k, gv, ok, tv)
				}
			}
			for k, gv := range greport {
				if _, ok := treport[k]; !ok && !gorunOnly(k) {
					t.Errorf("%s: %s=%q: gorun sets it and torchrun %s does not (docs/launcher.md lists what gorun adds)", name, k, gv, torchVersion)
				}
			}
		}
	})

	// local_elastic_agent_test.test_run_check_nccl_async_error_handling_env_c10d:
	// a value the user set is passed on unchanged (here also
	// OMP_NUM_THREADS, which then draws no warning: docs/sources.md, torchrun).
	t.Run("local_elastic_agent_test.test_run_check_nccl_async_error_handling_env_c10d", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			dir := t.TempDir()
			o := l.launch(t, job{args: []string{"--nproc-per-node=2"}, env: []string{"TORCH_NCCL_ASYNC_ERROR_HANDLING=0", "OMP_NUM_THREADS=3"},
				script: []string{script("compat_worker.py"), "env", dir}})
			if o.code != 0 {
				t.Fatalf("exit %d\n%s", o.code, o)
			}
			for name, report := range dumps(t, dir) {
				if report["TORCH_NCCL_ASYNC_ERROR_HANDLING"] != "0" || report["OMP_NUM_THREADS"] != "3" {
					t.Errorf("%s: TORCH_NCCL_ASYNC_ERROR_HANDLING=%q OMP_NUM_THREADS=%q; want the launcher's 0 and 3", name,
						report["TORCH_NCCL_ASYNC_ERROR_HANDLING"], report["OMP_NUM_THREADS"])
				}
			}
			if strings.Contains(o.stderr, "OMP_NUM_THREADS") {
				t.Errorf("a warning about OMP_NUM_THREADS, which the user set:\n%s", o.stderr)
			}
		})
	})

	// run_test.test_launch_user_script_python_caffe2_bc: a static
	// rendezvous on a given --master-addr, --master-port and --node-rank
	// runs the workers, whose MASTER_ADDR and MASTER_PORT are those
	// (local_elastic_agent_test.check_master_addr_port_override; upstream's
	// "test_host":42 cannot host 1.13's static store: localhost and a free
	// port here).
	t.Run("run_test.test_launch_user_script_python_caffe2_bc", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			dir, port := t.TempDir(), strconv.Itoa(freePort(t))
			o := l.launch(t, job{args: []string{"--nnodes=1", "--nproc-per-node=2", "--master-addr=localhost", "--master-port=" + port, "--node-rank=0"},
				script: []string{script("compat_worker.py"), "env", dir}})
			if o.code != 0 {
				t.Fatalf("exit %d\n%s", o.code, o)
			}
			reports := dumps(t, dir)
			if len(reports) != 2 {
				t.Errorf("workers %v; want ranks 0 and 1", reports)
			}
			for name, report := range reports {
				if report["MASTER_ADDR"] != "localhost" || report["MASTER_PORT"] != port {
					t.Errorf("%s: MASTER_ADDR=%q MASTER_PORT=%q; want localhost and %s", name, report["MASTER_ADDR"], report["MASTER_PORT"], port)
				}
			}
		})
	})
}

// TestLauncherEnv: the launcher's own environment. LOGLEVEL sets its log
// level as Python's logging.setLevel takes it: CRITICAL silences the
// OMP_NUM_THREADS warning. LOGLEVEL=10 is refused by torchrun
// (setLevel("10") raises ValueError: Unknown level, exit 1, before any
// worker starts; the same in torch main), while gorun reads Python's
// numeric levels (10 is DEBUG) and runs the job. No upstream test.
// Workers inherit the launcher's stdin (`echo hello | torchrun ...`).
func TestLauncherEnv(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, level string }{
		{"torchrun_doc.LOGLEVEL=CRITICAL", "CRITICAL"},
		{"torchrun_doc.LOGLEVEL=10", "10"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			both(t, func(t *testing.T, l launcher) {
				dir := t.TempDir()
				o := l.launch(t, job{args: []string{"--nproc-per-node=2"}, env: []string{"LOGLEVEL=" + tt.level},
					script: []string{script("compat_worker.py"), "touch", dir}})
				if tt.level == "10" && l == torchrun {
					if o.code != 1 || !strings.Contains(o.stderr, "Unknown level: '10'") {
						t.Errorf("exit %d; want 1 and ValueError: Unknown level: '10'\n%s", o.code, o)
					}
					wantTouched(t, dir, 0, o)
					return
				}
				if o.code != 0 {
					t.Errorf("exit %d; want 0\n%s", o.code, o)
				}
				wantTouched(t, dir, 2, o)
				warned := strings.Contains(o.stderr, "OMP_NUM_THREADS")
				if tt.level == "CRITICAL" && warned {
					t.Errorf("LOGLEVEL=CRITICAL, yet a warning:\n%s", o.stderr)
				}
				if tt.level == "10" && (!warned || !strings.Contains(strings.ToLower(o.stderr), "debug")) {
					t.Errorf("LOGLEVEL=10 (DEBUG): want the warnings and debug lines\n%s", o.stderr)
				}
			})
		})
	}

	t.Run("torchrun_doc.stdin_inherited", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			o := l.launch(t, job{stdin: "hello\n", script: []string{script("compat_worker.py"), "stdin", "unused"}})
			if o.code != 0 || len(linesEnding(o.stdout, "read: hello")) != 1 {
				t.Errorf("exit %d; want 0 and the worker to read hello from the launcher's stdin\n%s", o.code, o)
			}
		})
	})

	// run_test.test_is_torchelastic_launched: a worker knows it was
	// started by the launcher (torch.distributed.is_torchelastic_launched()
	// tests TORCHELASTIC_RUN_ID).
	t.Run("run_test.test_is_torchelastic_launched", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			dir := t.TempDir()
			o := l.launch(t, job{args: []string{"--run-path", "--nnodes=1", "--nproc-per-node=1", "--monitor-interval=1"},
				script: []string{script("compat_worker.py"), "launched", dir}})
			if data, _ := os.ReadFile(filepath.Join(dir, "launched.0")); o.code != 0 || string(data) != "True" {
				t.Errorf("exit %d, is_torchelastic_launched %q; want 0 and True\n%s", o.code, data, o)
			}
		})
	})
}

// TestNewerTorch: flags newer than torch 1.13, so gorun only, against the
// behaviour newer torch documents.
func TestNewerTorch(t *testing.T) {
	t.Parallel()
	worker := script("compat_worker.py")

	// run_test.test_is_torchelastic_launched_with_logs_spec_defined:
	// --logs-specs=default names the default LogsSpecs and runs the job.
	t.Run("run_test.test_is_torchelastic_launched_with_logs_spec_defined", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		o := gorun.launch(t, job{args: []string{"--run-path", "--nnodes=1", "--nproc-per-node=1", "--monitor-interval=1", "--logs_specs=default"},
			script: []string{worker, "launched", dir}})
		if data, _ := os.ReadFile(filepath.Join(dir, "launched.0")); o.code != 0 || string(data) != "True" {
			t.Errorf("exit %d, is_torchelastic_launched %q; want 0 and True\n%s", o.code, data, o)
		}
	})

	// run_test.test_logs_logs_spec_entrypoint_must_be_defined: an unknown
	// --logs-specs is refused (torch: ValueError) before any worker runs;
	// gorun's code for bad input is 2.
	t.Run("run_test.test_logs_logs_spec_entrypoint_must_be_defined", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		o := gorun.launch(t, job{args: []string{"--run-path", "--nnodes=1", "--nproc-per-node=1", "--monitor-interval=1", "--logs_specs=DOESNOT_EXIST"},
			script: []string{worker, "launched", dir}})
		if o.code != 2 || !strings.Contains(o.stderr, "DOESNOT_EXIST") {
			t.Errorf("exit %d; want 2 and an error naming DOESNOT_EXIST\n%s", o.code, o)
		}
		wantTouched(t, dir, 0, o)
	})

	// --local-ranks-filter=1: only local rank 1's output reaches the
	// console (torch's run.py: the other ranks' console streams go to
	// /dev/null). No upstream test.
	t.Run("torchrun_doc.local_ranks_filter", func(t *testing.T) {
		t.Parallel()
		o := gorun.launch(t, job{args: []string{"--nproc-per-node=2", "--local-ranks-filter=1"}, script: []string{worker, "echo", "unused"}})
		if o.code != 0 || len(linesEnding(o.stdout, "hello stdout from 1")) != 1 || len(linesEnding(o.stderr, "hello stderr from 1")) != 1 ||
			strings.Contains(o.stdout+o.stderr, "from 0") {
			t.Errorf("exit %d; want 0 and rank 1's lines alone on the console\n%s", o.code, o)
		}
	})

	// --local-addr: the address this node advertises; the rank-0 agent's
	// becomes MASTER_ADDR (torch's RendezvousStoreInfo.build). The c10d
	// endpoint localhost is this host, so this agent hosts the store
	// whatever --local-addr says. No upstream test.
	t.Run("torchrun_doc.local_addr", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		o := gorun.launch(t, job{args: c10dArgs("1", strconv.Itoa(freePort(t)), runID(), "--nproc-per-node=2", "--local-addr=127.0.0.2"),
			script: []string{worker, "env", dir}})
		if o.code != 0 {
			t.Fatalf("exit %d; want 0\n%s", o.code, o)
		}
		reports := dumps(t, dir)
		for name, report := range reports {
			if report["MASTER_ADDR"] != "127.0.0.2" {
				t.Errorf("%s: MASTER_ADDR=%q; want --local-addr's 127.0.0.2", name, report["MASTER_ADDR"])
			}
		}
		if len(reports) != 2 {
			t.Errorf("workers %v; want 2", reports)
		}
	})

	// run_test.test_launch_standalone: --standalone runs a single-node
	// job on a store of its own. gorun only: torchrun 1.13's --standalone
	// binds the fixed port 29400, which any other job on this shared
	// machine may hold (newer torch binds localhost:0).
	t.Run("run_test.test_launch_standalone", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		o := gorun.launch(t, job{args: []string{"--nnodes=1", "--nproc-per-node=4", "--standalone", "--monitor-interval=1", "--start-method=spawn"},
			script: []string{worker, "touch", dir}})
		if o.code != 0 {
			t.Errorf("exit %d; want 0\n%s", o.code, o)
		}
		wantTouched(t, dir, 4, o)
	})
}
