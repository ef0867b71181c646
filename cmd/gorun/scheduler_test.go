package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun-dev/gorun/internal/cmdline/scheduler"
)

// slurmJobID returns a job id whose embedded store ports (the client
// port and the members' peer port after it) are free on the n hosts
// 127.0.0.[1-n].
func slurmJobID(t *testing.T, n int) string {
	t.Helper()
	for id := 1000 + os.Getpid()%5000; ; id++ {
		job := strconv.Itoa(id)
		port := scheduler.StorePort(job + ".0")
		free := true
		for i := 1; i <= n && free; i++ {
			for _, p := range []int{port, port + 1} {
				ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%d", i, p))
				if err != nil {
					free = false
					break
				}
				ln.Close()
			}
		}
		if free {
			return job
		}
	}
}

// slurmEnv is what srun sets for node i of a one-task-per-node step on
// the hosts 127.0.0.[1-n] (loopback addresses stand for the nodes).
func slurmEnv(job string, n, i int) []string {
	return []string{"SLURM_JOB_ID=" + job, "SLURM_STEP_ID=0", "SLURM_NNODES=" + strconv.Itoa(n),
		"SLURM_JOB_NODELIST=127.0.0.[1-" + strconv.Itoa(n) + "]", "SLURM_NODEID=" + strconv.Itoa(i),
		"SLURMD_NODENAME=127.0.0." + strconv.Itoa(i+1), "SLURM_STEP_TASKS_PER_NODE=1(x" + strconv.Itoa(n) + ")",
		"SLURM_GPUS_ON_NODE=2"}
}

// TestSlurmJobWithoutRendezvousFlags: three nodes under Slurm's
// environment and no rendezvous flag form one job: node i's workers are
// group rank i, the world is 3 x SLURM_GPUS_ON_NODE, and the master is
// the first host of the list.
func TestSlurmJobWithoutRendezvousFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	job := slurmJobID(t, 3)
	script := startWorker(t, "")
	var nodes []*node
	for i := range 3 {
		cmd, out, errb := startGorun(t, testEnv(slurmEnv(job, 3, i)...), "--nproc-per-node=gpu", "--no-python", script, dir)
		nodes = append(nodes, &node{cmd, out, errb})
	}
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Fatalf("node %d exit %d\n%s", i, code, n.stderr)
		}
	}
	got := starts(dir)
	for r := range 6 {
		if k := fmt.Sprintf("%d.6.0", r); got[k] != 1 {
			t.Errorf("rank %d started %d times with WORLD_SIZE=6; starts %v", r, got[k], got)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.6.0.*"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		fields := strings.Fields(string(b))
		rank, _ := strconv.Atoi(strings.Split(filepath.Base(f), ".")[0])
		if fields[0] != strconv.Itoa(rank/2) || !strings.HasPrefix(fields[1], "127.0.0.1:") {
			t.Errorf("rank %d: group rank and master %v; want group rank %d, master 127.0.0.1 (SLURM_NODEID, first host)", rank, fields, rank/2)
		}
	}
	// Once, not again by the gorun-etcd that gorun becomes.
	if n := strings.Count(nodes[1].stderr.String(), "slurm: --nnodes=3 --node-rank=1"); n != 1 {
		t.Errorf("node 1 said %d times what it took from Slurm; want once:\n%s", n, nodes[1].stderr)
	}
	// Three nodes: the store's three members on the three hosts.
	for i, n := range nodes {
		if want := fmt.Sprintf("member %d of the job's store serves", i); !strings.Contains(n.stderr.String(), want) {
			t.Errorf("node %d did not host member %d of the store:\n%s", i, i, n.stderr)
		}
	}
}

// TestSchedulerDryRun: --dry-run --format json shows each value taken
// from the scheduler's environment, where it came from, and which the
// user's flags override; bad scheduler environments are usage errors.
func TestSchedulerDryRun(t *testing.T) {
	t.Parallel()
	type dry struct {
		Scheduler     string `json:"scheduler"`
		FromScheduler []struct {
			Flag, Value, Source string
			Overridden          bool `json:"overridden_by_flag"`
		} `json:"from_scheduler"`
		Workers []struct {
			Rank int `json:"rank"`
		} `json:"workers"`
	}
	for _, tt := range []struct {
		name  string
		env   []string
		args  []string
		sched string
		want  map[string]string // flag -> value (+ " overridden")
		rank0 int               // global rank of the first worker
	}{
		{name: "slurm", env: slurmEnv("77", 4, 3), args: []string{"--nproc-per-node=auto"}, sched: "slurm", rank0: 6,
			want: map[string]string{"nnodes": "4", "node-rank": "3", "rdzv-id": "77.0", "local-addr": "127.0.0.4", "nproc-per-node": "2",
				"rdzv-endpoint": "127.0.0.1:" + strconv.Itoa(scheduler.StorePort("77.0"))}},
		{name: "slurm, flags win", env: slurmEnv("77", 4, 3), args: []string{"--nnodes=4", "--rdzv-id=mine", "--nproc-per-node=1"}, sched: "slurm", rank0: 3,
			want: map[string]string{"nnodes": "4 overridden", "rdzv-id": "77.0 overridden", "node-rank": "3"}},
		{name: "PyTorchJob", env: []string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "MASTER_ADDR=job-master-0", "MASTER_PORT=23456",
			"PET_NNODES=2", "PET_NODE_RANK=1", "PET_NPROC_PER_NODE=2"}, sched: "kubernetes", rank0: 2,
			want: map[string]string{"master-addr": "job-master-0", "master-port": "23456"}},
		{name: "JobSet", env: []string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=2", "MASTER_ADDR=train-w-0-0.train",
			"MASTER_PORT=29500"}, args: []string{"--nnodes=3"}, sched: "kubernetes", rank0: 2,
			want: map[string]string{"master-addr": "train-w-0-0.train", "node-rank": "2", "master-port": "29500"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"--dry-run", "--format=json"}, tt.args...), "--no-python", "/bin/true")
			r := runGorun(t, testEnv(tt.env...), args...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			var d dry
			if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
				t.Fatalf("%v\n%s", err, r.stdout)
			}
			got := map[string]string{}
			for _, s := range d.FromScheduler {
				if s.Source == "" {
					t.Errorf("--%s has no source", s.Flag)
				}
				got[s.Flag] = s.Value
				if s.Overridden {
					got[s.Flag] += " overridden"
				}
			}
			for flag, v := range tt.want {
				if got[flag] != v {
					t.Errorf("--%s: %q; want %q (all: %v)", flag, got[flag], v, got)
				}
			}
			if d.Scheduler != tt.sched || len(d.Workers) == 0 || d.Workers[0].Rank != tt.rank0 {
				t.Errorf("scheduler %q, workers %+v; want %s, first rank %d", d.Scheduler, d.Workers, tt.sched, tt.rank0)
			}
		})
	}
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"two tasks per node", append(slurmEnv("77", 2, 0), "SLURM_STEP_TASKS_PER_NODE=2(x2)"), nil, "srun started 2 tasks on this node"},
		{"batch script of a 2-node job", []string{"SLURM_JOB_ID=77", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=n[1-2]", "SLURM_NODEID=0"}, nil, "srun --ntasks-per-node=1"},
		{"bad host list", append(slurmEnv("77", 2, 0), "SLURM_STEP_NODELIST=n[1-"), nil, "SLURM_STEP_NODELIST"},
		{"slurm asked for, absent", nil, []string{"--scheduler=slurm"}, "SLURM_JOB_ID is not set"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"--dry-run"}, tt.args...), "--no-python", "/bin/true")
			r := runGorun(t, testEnv(tt.env...), args...)
			if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d; want 2 and %q\n%s", r.code, tt.want, r.stderr)
			}
		})
	}
	// --scheduler=none ignores even a broken environment.
	r := runGorun(t, testEnv(append(slurmEnv("77", 2, 0), "SLURM_STEP_TASKS_PER_NODE=2(x2)")...), "--scheduler=none", "--dry-run", "--no-python", "/bin/true")
	if r.code != 0 {
		t.Errorf("--scheduler=none: exit %d\n%s", r.code, r.stderr)
	}
}

// TestSlurmWarnsOfAnotherWorkerSignal: under Slurm, whose scancel sends
// the workers SIGTERM directly, a worker signal other than TERM is named
// with a warning at launch.
func TestSlurmWarnsOfAnotherWorkerSignal(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		signal string
		warns  bool
	}{{"none", true}, {"USR2", true}, {"SIGTERM", false}, {"", false}} {
		args := []string{"--no-python", "/bin/true"}
		if tt.signal != "" {
			args = append([]string{"--preempt-worker-signal=" + tt.signal}, args...)
		}
		r := runGorun(t, testEnv(slurmEnv("77", 1, 0)...), args...)
		if r.code != 0 || strings.Contains(r.stderr, "under Slurm: scancel and the time limit send SIGTERM") != tt.warns {
			t.Errorf("--preempt-worker-signal=%q: exit %d, warning %v:\n%s", tt.signal, r.code, tt.warns, r.stderr)
		}
	}
}

// TestNodeRankBeyondNodeCount: an indexed Job's pod of index 2 without
// PET_NNODES would run alone, pointed at pod 0's store: refused, naming
// the node count to give.
func TestNodeRankBeyondNodeCount(t *testing.T) {
	t.Parallel()
	env := testEnv("KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29555")
	r := runGorun(t, env, "--no-python", "/bin/true")
	if r.code != 2 || !strings.Contains(r.stderr, "--node-rank=2 is not below --nnodes (1)") || !strings.Contains(r.stderr, "PET_NNODES") {
		t.Errorf("exit %d; want 2 and the node count named:\n%s", r.code, r.stderr)
	}
}
