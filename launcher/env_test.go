package launcher

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/rendezvous"
)

func envMap(vars []EnvVar) map[string]string {
	m := map[string]string{}
	for _, v := range vars {
		m[v.Name] = v.Value
	}
	return m
}

func TestSharedEnvMemoryDefaults(t *testing.T) {
	tests := []struct {
		name      string
		environ   []string
		args      []string
		noDefault bool
		wantAlloc string // "" means not added
		wantReuse string
		wantWarn  string
	}{
		{name: "unset", wantAlloc: "expandable_segments:True", wantReuse: "2"},
		{name: "user value kept as it is", environ: []string{"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128"},
			wantReuse: "2", wantWarn: "keeping your PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128 as it is; gorun's default would add expandable_segments:True"},
		{name: "user set it empty", environ: []string{"PYTORCH_CUDA_ALLOC_CONF="}, wantReuse: "2"},
		{name: "CUDA's own allocator", environ: []string{"PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"}, wantReuse: "2"},
		{name: "user chose expandable segments", environ: []string{"PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6, expandable_segments:False"},
			wantReuse: "2"},
		{name: "user reuse mode wins", environ: []string{"MULTI_STREAM_MEMORY_REUSE=0"}, wantAlloc: "expandable_segments:True"},
		// torch 2.9's name for every accelerator: the user's value, which
		// PYTORCH_CUDA_ALLOC_CONF would override, is kept.
		{name: "user value under the generic name", environ: []string{"PYTORCH_ALLOC_CONF=max_split_size_mb:512"},
			wantReuse: "2", wantWarn: "keeping your PYTORCH_ALLOC_CONF=max_split_size_mb:512 as it is"},
		{name: "ROCm's name", environ: []string{"PYTORCH_HIP_ALLOC_CONF=max_split_size_mb:256"},
			wantReuse: "2", wantWarn: "keeping your PYTORCH_HIP_ALLOC_CONF=max_split_size_mb:256 as it is"},
		{name: "opted out under the generic name", environ: []string{"PYTORCH_ALLOC_CONF=expandable_segments:False"}, wantReuse: "2"},
		{name: "the CUDA name wins over the generic one", environ: []string{"PYTORCH_ALLOC_CONF=expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64"},
			wantReuse: "2", wantWarn: "keeping your PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64"},
		{name: "nccl user buffers", args: []string{"--lr", "1", "--use-nccl-ub"}, wantReuse: "2", wantWarn: "--use-nccl-ub"},
		{name: "disabled", noDefault: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{NprocPerNode: 1, Environ: tt.environ, MemoryDefaults: !tt.noDefault, Entrypoint: Entrypoint{Args: tt.args}}
			vars, warns := SharedEnv(&cfg)
			m := envMap(vars)
			if got := m[workerenv.AllocConf]; got != tt.wantAlloc {
				t.Errorf("%s = %q; want %q", workerenv.AllocConf, got, tt.wantAlloc)
			}
			if got := m[EnvReuseMode]; got != tt.wantReuse {
				t.Errorf("%s = %q; want %q", EnvReuseMode, got, tt.wantReuse)
			}
			joined := strings.Join(warns, "\n")
			if (tt.wantWarn == "") != (joined == "") || !strings.Contains(joined, tt.wantWarn) {
				t.Errorf("warnings = %q; want one containing %q", joined, tt.wantWarn)
			}
		})
	}
}

func TestSharedEnvOMP(t *testing.T) {
	tests := []struct {
		nproc   int
		environ []string
		want    string
		warn    bool
	}{
		{2, nil, "1", true},
		{1, nil, "", false},
		{4, []string{"OMP_NUM_THREADS=8"}, "", false},
	}
	for _, tt := range tests {
		cfg := Config{NprocPerNode: tt.nproc, Environ: tt.environ}
		vars, warns := SharedEnv(&cfg)
		if got := envMap(vars)["OMP_NUM_THREADS"]; got != tt.want || (len(warns) > 0) != tt.warn {
			t.Errorf("nproc %d environ %v: OMP_NUM_THREADS=%q warnings %q; want %q, warning %v", tt.nproc, tt.environ, got, warns, tt.want, tt.warn)
		}
	}
}

// TestSharedEnvUnbuffered: a program gorun does not run with python -u
// (--no-python) gets PYTHONUNBUFFERED=1, so that a Python behind it
// prints its lines before its traceback, not at exit; unless the user
// set it.
func TestSharedEnvUnbuffered(t *testing.T) {
	for _, tt := range []struct {
		name    string
		e       Entrypoint
		environ []string
		want    string
	}{
		{"--no-python python3", Entrypoint{Script: "python3", NoPython: true}, nil, "1"},
		{"--no-python, the user's value", Entrypoint{Script: "train.sh", NoPython: true}, []string{"PYTHONUNBUFFERED="}, ""},
		{"a script: python -u already", Entrypoint{Script: "train.py", Python: []string{"python3"}}, nil, ""},
		{"--run-path: python -u already", Entrypoint{Script: "train.py", NoPython: true, RunPath: true}, nil, ""},
	} {
		cfg := Config{NprocPerNode: 1, Environ: tt.environ, Entrypoint: tt.e}
		vars, _ := SharedEnv(&cfg)
		if got := envMap(vars)["PYTHONUNBUFFERED"]; got != tt.want {
			t.Errorf("%s: PYTHONUNBUFFERED=%q; want %q", tt.name, got, tt.want)
		}
	}
}

func TestWorkerSpecsEnvironment(t *testing.T) {
	cfg := Config{
		NprocPerNode: 2, Role: "trainer", MaxRestarts: 3,
		Environ:    []string{"PATH=/bin", "RANK=99", "KEEP=me"},
		Entrypoint: Entrypoint{Script: "train.py", Args: []string{"--lr", "3e-4"}, Python: []string{"python3"}},
	}
	round := rendezvous.Round{RunID: "job", GroupRank: 1, GroupWorldSize: 2, BaseRank: 2, WorldSize: 4,
		BaseRoleRank: 2, RoleWorldSize: 4, MasterAddr: "10.0.0.1", MasterPort: 1234}
	specs, err := WorkerSpecs(&cfg, nil, round, 2, func(lr int) string { return "/e/" + string(rune('0'+lr)) })
	if err != nil || len(specs) != 2 {
		t.Fatalf("got %d workers, %v; want 2", len(specs), err)
	}
	want := map[string]string{
		"LOCAL_RANK": "1", "RANK": "3", "GROUP_RANK": "1", "ROLE_RANK": "3", "ROLE_NAME": "trainer",
		"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "2", "ROLE_WORLD_SIZE": "4",
		"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234", "TORCHELASTIC_RESTART_COUNT": "2",
		"TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_RUN_ID": "job", "TORCHELASTIC_USE_AGENT_STORE": "False",
		"TORCHELASTIC_ERROR_FILE": "/e/1", "GORUN_PROGRESS_FILE": "/e/progress",
	}
	if got := envMap(specs[1].Added); !reflect.DeepEqual(got, want) {
		t.Errorf("added env of local rank 1 =\n%v\nwant\n%v", got, want)
	}
	env := specs[1].Env
	if !slices.Contains(env, "RANK=3") || slices.Contains(env, "RANK=99") || !slices.Contains(env, "KEEP=me") {
		t.Errorf("worker env %v: want RANK replaced and KEEP kept", env)
	}
	if specs[1].Rank != 3 || specs[1].ErrorFile != "/e/1" {
		t.Errorf("spec = %+v", specs[1])
	}
}

func TestArgv(t *testing.T) {
	py := []string{"python3", "-X", "dev"}
	args := []string{"--name", "a b", "it's", ""}
	tests := []struct {
		name string
		e    Entrypoint
		want []string
	}{
		{"script", Entrypoint{Script: "t.py", Args: args, Python: py}, append([]string{"python3", "-X", "dev", "-u", "t.py"}, args...)},
		{"module", Entrypoint{Script: "pkg.train", Module: true, Python: py}, []string{"python3", "-X", "dev", "-u", "-m", "pkg.train"}},
		{"no python", Entrypoint{Script: "./bin", NoPython: true, Args: args}, append([]string{"./bin"}, args...)},
		{"run path", Entrypoint{Script: "/t.py", RunPath: true, NoPython: true, Python: []string{"py"}}, []string{"py", "-u", "-c", runPathCode, "/t.py"}},
	}
	for _, tt := range tests {
		if got := tt.e.Argv(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Argv() = %q; want %q", tt.name, got, tt.want)
		}
	}
}

func TestExpandPrefix(t *testing.T) {
	if got := ExpandPrefix("[${role_name}${rank}|${local_rank}@${hostname}]:", "default", 1, 9, "node7"); got != "[default9|1@node7]:" {
		t.Errorf("ExpandPrefix = %q", got)
	}
}

func TestParseFilters(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"apple,orange", []string{"apple", "orange"}},
		{"loss", []string{"loss"}},
		{"a,,b,c", []string{"a,b", "c"}},
		{"", []string{""}},
		{",x", []string{"", "x"}},
	} {
		if got := ParseFilters(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("ParseFilters(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestFilteredLines feeds a stream in chunks that split lines and checks
// that only the lines holding a filter reach the shared file, whole and
// prefixed.
func TestFilteredLines(t *testing.T) {
	var out strings.Builder
	f := &filteredLines{out: NewConsole(&out), filters: []string{"loss", "a,b"}, prefix: "[default0]:"}
	for _, chunk := range []string{"step 1 lo", "ss 2.0\nnoise\nx a,b y\n", "tail loss without newline"} {
		if n, err := f.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	f.flush()
	want := "[default0]:step 1 loss 2.0\n[default0]:x a,b y\n[default0]:tail loss without newline\n"
	if out.String() != want {
		t.Errorf("filtered = %q; want %q", out.String(), want)
	}
}

// TestVirtualLocalRank: torchrun 2.x's --virtual-local-rank gives each
// worker LOCAL_RANK=0 and its own GPU as device 0.
func TestVirtualLocalRank(t *testing.T) {
	for _, tt := range []struct {
		name    string
		environ []string
		want    []map[string]string // by local rank
		wantErr string
	}{
		{name: "no visible devices set", want: []map[string]string{
			{"LOCAL_RANK": "0", "RANK": "0", "CUDA_VISIBLE_DEVICES": "0"},
			{"LOCAL_RANK": "0", "RANK": "1", "CUDA_VISIBLE_DEVICES": "1"}}},
		{name: "the launcher's CUDA_VISIBLE_DEVICES", environ: []string{"CUDA_VISIBLE_DEVICES=4, 6"}, want: []map[string]string{
			{"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "4", "HIP_VISIBLE_DEVICES": ""},
			{"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "6"}}},
		{name: "ROCm's HIP_VISIBLE_DEVICES first", environ: []string{"CUDA_VISIBLE_DEVICES=0,1", "HIP_VISIBLE_DEVICES=2,3"}, want: []map[string]string{
			{"CUDA_VISIBLE_DEVICES": "2", "HIP_VISIBLE_DEVICES": "2"},
			{"CUDA_VISIBLE_DEVICES": "3", "HIP_VISIBLE_DEVICES": "3"}}},
		{name: "more workers than devices", environ: []string{"CUDA_VISIBLE_DEVICES=5"},
			wantErr: `VirtualLocalRank: local rank 1 has no GPU in CUDA_VISIBLE_DEVICES="5" (1 listed); want NprocPerNode at most 1`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{NprocPerNode: 2, Role: "default", Environ: tt.environ, VirtualLocalRank: true, Entrypoint: Entrypoint{Script: "x", NoPython: true}}
			round := rendezvous.Round{RunID: "j", GroupWorldSize: 1, WorldSize: 2, RoleWorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 1}
			specs, err := WorkerSpecs(&cfg, nil, round, 0, func(lr int) string { return "/e/" + strconv.Itoa(lr) })
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v; want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for lr, want := range tt.want {
				got := envMap(specs[lr].Added)
				for k, v := range want {
					if got[k] != v {
						t.Errorf("local rank %d: %s=%q; want %q", lr, k, got[k], v)
					}
				}
			}
		})
	}
}
