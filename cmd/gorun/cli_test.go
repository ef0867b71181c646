package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// envDump prints the variables a torchrun worker gets, one per line.
const envDump = `for k in RANK LOCAL_RANK GROUP_RANK ROLE_RANK ROLE_NAME LOCAL_WORLD_SIZE WORLD_SIZE GROUP_WORLD_SIZE \
ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID \
TORCHELASTIC_USE_AGENT_STORE TORCHELASTIC_ERROR_FILE TORCH_NCCL_ASYNC_ERROR_HANDLING NCCL_ASYNC_ERROR_HANDLING \
TORCHELASTIC_SIGNALS_TO_HANDLE OMP_NUM_THREADS PYTORCH_CUDA_ALLOC_CONF MULTI_STREAM_MEMORY_REUSE; do eval "echo $k=\${$k-<unset>}"; done
`

func parseDump(lines []string) map[string]string {
	m := map[string]string{}
	for _, l := range lines {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

func TestWorkerEnvironment(t *testing.T) {
	t.Parallel()
	script := writeScript(t, envDump)
	tests := []struct {
		name string
		env  []string
		args []string
		want map[string]string // for local rank 1
		warn string
	}{
		{
			name: "defaults",
			args: []string{"--nproc-per-node=2", "--max-restarts=2", "--rdzv-id=job1", "--no-python", script},
			want: map[string]string{
				"RANK": "1", "LOCAL_RANK": "1", "GROUP_RANK": "0", "ROLE_RANK": "1", "ROLE_NAME": "default",
				"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "1", "ROLE_WORLD_SIZE": "2",
				"MASTER_ADDR": "127.0.0.1", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "2",
				"TORCHELASTIC_RUN_ID": "job1", "TORCHELASTIC_USE_AGENT_STORE": "False",
				"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_ASYNC_ERROR_HANDLING": "<unset>", "OMP_NUM_THREADS": "1",
				"TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
				"PYTORCH_CUDA_ALLOC_CONF":        "expandable_segments:True", "MULTI_STREAM_MEMORY_REUSE": "2",
			},
			warn: "OMP_NUM_THREADS=1",
		},
		{
			name: "user values win",
			env:  []string{"OMP_NUM_THREADS=4", "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64", "MULTI_STREAM_MEMORY_REUSE=1", "NCCL_ASYNC_ERROR_HANDLING=0"},
			args: []string{"--nproc_per_node", "2", "--role", "trainer", "--signals-to-handle=SIGTERM,usr1", "--no_python", script},
			want: map[string]string{
				"ROLE_NAME": "trainer", "OMP_NUM_THREADS": "4", "NCCL_ASYNC_ERROR_HANDLING": "0",
				"TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGUSR1",
				"PYTORCH_CUDA_ALLOC_CONF":        "max_split_size_mb:64", "MULTI_STREAM_MEMORY_REUSE": "1",
			},
		},
		{
			name: "no memory defaults",
			args: []string{"--nproc-per-node=2", "--no-memory-defaults", "--no-python", script},
			want: map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "<unset>", "MULTI_STREAM_MEMORY_REUSE": "<unset>"},
		},
		{
			name: "nccl user buffers",
			args: []string{"--nproc-per-node=2", "--no-python", script, "--use-nccl-ub"},
			want: map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "<unset>", "MULTI_STREAM_MEMORY_REUSE": "2"},
			warn: "--use-nccl-ub",
		},
		{
			name: "PET_ and GORUN_ fallbacks, flag beats both",
			env:  []string{"PET_NPROC_PER_NODE=5", "GORUN_NPROC_PER_NODE=2", "PET_MAX_RESTARTS=4", "PET_RDZV_ID=fromenv", "GORUN_RDZV_ID=gorunenv", "PET_NO_PYTHON=1"},
			args: []string{"--rdzv-id=flag", script},
			want: map[string]string{"WORLD_SIZE": "2", "TORCHELASTIC_MAX_RESTARTS": "4", "TORCHELASTIC_RUN_ID": "flag"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runGorun(t, testEnv(tt.env...), tt.args...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			got := parseDump(linesWithPrefix(r.stdout, "[default1]:"))
			if tt.want["ROLE_NAME"] == "trainer" {
				got = parseDump(linesWithPrefix(r.stdout, "[trainer1]:"))
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q; want %q", k, got[k], v)
				}
			}
			if !strings.HasSuffix(got["TORCHELASTIC_ERROR_FILE"], "/attempt_0/1/error.json") {
				t.Errorf("TORCHELASTIC_ERROR_FILE = %q", got["TORCHELASTIC_ERROR_FILE"])
			}
			if tt.warn != "" && !strings.Contains(r.stderr, tt.warn) {
				t.Errorf("stderr lacks a warning about %q:\n%s", tt.warn, r.stderr)
			}
		})
	}
}

func TestArgumentsPassThrough(t *testing.T) {
	t.Parallel()
	script := writeScript(t, `for a in "$@"; do echo "<$a>"; done`)
	args := []string{"--nproc-per-node=4", "--lr", "3e-4", "two words", `quote"d`, "it's", "", "-m", "--", "*", "$HOME"}
	r := runGorun(t, testEnv(), append([]string{"--no-python", script}, args...)...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	got := linesWithPrefix(r.stdout, "[default0]:")
	want := make([]string, len(args))
	for i, a := range args {
		want[i] = "<" + a + ">"
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("script got %q; want %q", got, want)
	}
}

func TestPythonInterpreter(t *testing.T) {
	t.Parallel()
	py := testPython(t)
	script := filepath.Join(t.TempDir(), "w.py")
	if err := os.WriteFile(script, []byte("import sys, os\nprint('-u' in sys.orig_argv, os.environ['RANK'], sys.argv[1:])\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flag", nil, []string{"--python", py, script, "a b"}},
		{"GORUN_PYTHON", []string{"GORUN_PYTHON=" + py}, []string{script, "a b"}},
		{"run path", []string{"GORUN_PYTHON=" + py}, []string{"--run-path", script, "a b"}},
	} {
		r := runGorun(t, testEnv(tt.env...), tt.args...)
		if r.code != 0 || !strings.Contains(r.stdout, "[default0]:True 0 ['a b']") {
			t.Errorf("%s: exit %d stdout %q stderr %q; want an unbuffered interpreter and the argument", tt.name, r.code, r.stdout, r.stderr)
		}
	}
	mod := t.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "mymod.py"), []byte("import sys\nprint('module', sys.argv[1:])\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runGorun(t, testEnv("PYTHONPATH="+mod), "--python", py, "-m", "mymod", "x")
	if r.code != 0 || !strings.Contains(r.stdout, "[default0]:module ['x']") {
		t.Errorf("-m: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unknown flag", nil, []string{"--bogus", "x.py"}, "bogus"},
		{"no script", nil, []string{"--nproc-per-node=2"}, "no training script"},
		{"nproc", nil, []string{"--nproc-per-node=many", "x.py"}, "--nproc-per-node"},
		{"nproc zero", nil, []string{"--nproc-per-node=0", "x.py"}, "--nproc-per-node"},
		{"nnodes", nil, []string{"--nnodes=3:1", "x.py"}, "--nnodes"},
		{"redirects", nil, []string{"--redirects=7", "--log-dir=/tmp", "x.py"}, "--redirects"},
		{"max restarts", nil, []string{"--max-restarts=-1", "x.py"}, "--max-restarts"},
		{"max restarts env", []string{"PET_MAX_RESTARTS=lots"}, []string{"x.py"}, "PET_MAX_RESTARTS"},
		{"module and no-python", nil, []string{"-m", "--no-python", "x"}, "--no-python"},
		{"local ranks filter", nil, []string{"--nproc-per-node=2", "--local-ranks-filter=0,-1", "x.py"}, "--local-ranks-filter"},
		{"exit codes", nil, []string{"--no-restart-on-exit-codes=300", "x.py"}, "--no-restart-on-exit-codes"},
		{"stop timeout", nil, []string{"--stop-timeout=soon", "x.py"}, "--stop-timeout"},
		{"signals", nil, []string{"--signals-to-handle=SIGKILL", "x.py"}, "--signals-to-handle"},
		{"rdzv conf", nil, []string{"--rdzv-conf=a", "x.py"}, "--rdzv-conf"},
		{"backend", nil, []string{"--rdzv-backend=zookeeper", "x.py"}, "--rdzv-backend"},
		{"multi-node elastic without endpoint", nil, []string{"--nnodes=2:4", "--rdzv-backend=c10d", "x.py"}, "--rdzv-endpoint"},
		{"rdzv conf value", nil, []string{"--nnodes=2", "--rdzv-backend=etcd", "--rdzv-endpoint=127.0.0.1:1", "--rdzv-conf=join_timeout=soon", "x.py"}, "join_timeout"},
		{"static node rank", nil, []string{"--nnodes=2", "--node-rank=2", "x.py"}, "--node-rank"},
		{"start method", nil, []string{"--start-method=thread", "x.py"}, "--start-method"},
		{"logs specs", nil, []string{"--logs-specs=mine", "x.py"}, "--logs-specs"},
		{"log level", nil, []string{"--log-level=loud", "x.py"}, "--log-level"},
		{"format", nil, []string{"--dry-run", "--format=yaml", "x.py"}, "--format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runGorun(t, testEnv(tt.env...), tt.args...)
			if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("gorun %q: exit %d, stderr %q; want exit 2 and a message naming %q", tt.args, r.code, r.stderr, tt.want)
			}
			if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("gorun %q panicked:\n%s", tt.args, r.stderr)
			}
		})
	}
}

func TestVersionAndHelp(t *testing.T) {
	t.Parallel()
	if r := runGorun(t, testEnv(), "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "gorun version ") {
		t.Errorf("--version: exit %d stdout %q", r.code, r.stdout)
	}
	r := runGorun(t, testEnv(), "--help")
	for _, want := range []string{"WORKERS", "RENDEZVOUS", "RESTARTS AND STOPPING", "LOGGING", "MEMORY",
		"--nproc-per-node value, --nproc_per_node value", "$PET_NPROC_PER_NODE", "--max-restarts", "--dry-run"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func TestDryRun(t *testing.T) {
	t.Parallel()
	r := runGorun(t, testEnv(), "--dry-run", "--format=json", "--nnodes=2", "--node-rank=1", "--master-addr=10.1.2.3",
		"--nproc-per-node=2", "--rdzv-id=j", "train.py", "--lr", "1")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var dry struct {
		RunID   string `json:"run_id"`
		Workers []struct {
			Rank      int      `json:"rank"`
			LocalRank int      `json:"local_rank"`
			Argv      []string `json:"argv"`
			Env       []struct{ Name, Value string }
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &dry); err != nil {
		t.Fatalf("dry-run JSON: %v\n%s", err, r.stdout)
	}
	if dry.RunID != "j" || len(dry.Workers) != 2 || dry.Workers[1].Rank != 3 || dry.Workers[1].LocalRank != 1 {
		t.Fatalf("dry = %+v", dry)
	}
	if want := []string{"python3", "-u", "train.py", "--lr", "1"}; !reflect.DeepEqual(dry.Workers[1].Argv, want) {
		t.Errorf("argv = %q; want %q", dry.Workers[1].Argv, want)
	}
	env := map[string]string{}
	for _, v := range dry.Workers[1].Env {
		env[v.Name] = v.Value
	}
	// What the agent adds at its start is shown too: the stop file and
	// signal, and the folder of gorun's Python modules.
	for k, v := range map[string]string{"RANK": "3", "WORLD_SIZE": "4", "GROUP_RANK": "1", "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500",
		"GORUN_STOP_FILE": "<temporary directory>/stop", "GORUN_STOP_SIGNAL": "TERM", "PYTHONPATH": "<temporary directory gorun-python-*>"} {
		if env[k] != v {
			t.Errorf("%s = %q; want %q", k, env[k], v)
		}
	}
	for _, tt := range []struct {
		args []string
		addr string
		port string
	}{
		{[]string{"--nnodes=2", "--rdzv-endpoint=node0:1234"}, "node0", "1234"},
		{[]string{"--nnodes=2", "--rdzv-endpoint=[fd00::1]", "--master-port=77"}, "fd00::1", "77"},
		{[]string{"--local-addr=10.9.8.7", "--master-port=5000"}, "10.9.8.7", "5000"},
	} {
		r := runGorun(t, testEnv(), append(append([]string{"--dry-run", "--format=json"}, tt.args...), "x.py")...)
		if r.code != 0 || !strings.Contains(r.stdout, `"value": "`+tt.addr+`"`) || !strings.Contains(r.stdout, `"value": "`+tt.port+`"`) {
			t.Errorf("%q: exit %d; want MASTER_ADDR %s and MASTER_PORT %s in\n%s%s", tt.args, r.code, tt.addr, tt.port, r.stdout, r.stderr)
		}
	}
	text := runGorun(t, testEnv(), "--dry-run", "--standalone", "--nproc-per-node=2", "train.py", "a b")
	if text.code != 0 || !strings.Contains(text.stdout, "rank 1 (local rank 1)") || !strings.Contains(text.stdout, "python3 -u train.py 'a b'") ||
		!strings.Contains(text.stdout, "free port chosen when the job starts") {
		t.Errorf("text dry run: exit %d\n%s", text.code, text.stdout)
	}
}

func TestConcurrentJobsGetOwnPorts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, `echo "$MASTER_PORT" > "$1/port.$2.$RANK"; while [ "$(ls "$1" | wc -l)" -lt 4 ]; do sleep 0.01; done`)
	type outcome struct {
		r   result
		err error
	}
	done := make(chan outcome, 2)
	for _, job := range []string{"a", "b"} {
		go func() {
			r, err := execGorun(testEnv(), "--standalone", "--nproc-per-node=2", "--no-python", script, dir, job)
			done <- outcome{r, err}
		}()
	}
	for range 2 {
		if o := <-done; o.err != nil || o.r.code != 0 {
			t.Fatalf("exit %d, %v\n%s", o.r.code, o.err, o.r.stderr)
		}
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	a, b := read("port.a.0"), read("port.b.0")
	if a != read("port.a.1") || b != read("port.b.1") || a == b {
		t.Errorf("job a port %s, job b port %s: want one port per job, different between jobs", a, b)
	}
}

// TestBenchLaunchRuns smoke-tests `gorun bench launch` with one run of each
// case and no torchrun (the figures themselves are not checked: a benchmark
// is not a timed test).
func TestBenchLaunchRuns(t *testing.T) {
	t.Parallel()
	py := testPython(t)
	md := filepath.Join(t.TempDir(), "bench.md")
	r := runGorun(t, testEnv(), "bench", "launch", "--python", py, "--runs=1", "--warmup=0", "--skip-torchrun", "--write", md)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var res struct {
		Empty struct{ N int } `json:"empty_job_gorun"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Empty.N != 1 {
		t.Errorf("JSON result %q: %v", r.stdout, err)
	}
	if data, err := os.ReadFile(md); err != nil || !strings.Contains(string(data), "## Launch and restart") {
		t.Errorf("%s = %q, %v", md, data, err)
	}
}
