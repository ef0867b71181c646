package scheduler

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// env returns a getenv over pairs "K=V".
func env(pairs ...string) func(string) string {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

// srunStep is what srun sets for task 2 of `srun --nodes=4
// --ntasks-per-node=1` in job 4242 (the variables gorun reads, as Slurm
// 23.x names them).
var srunStep = []string{
	"SLURM_JOB_ID=4242", "SLURM_JOB_NUM_NODES=4", "SLURM_NNODES=4", "SLURM_JOB_NODELIST=gpu-[001-003],gpu-010",
	"SLURM_STEP_ID=0", "SLURM_STEPID=0", "SLURM_STEP_NUM_NODES=4", "SLURM_STEP_NODELIST=gpu-[001-003],gpu-010",
	"SLURM_STEP_NUM_TASKS=4", "SLURM_STEP_TASKS_PER_NODE=1(x4)", "SLURM_TASKS_PER_NODE=8(x4)",
	"SLURM_NODEID=2", "SLURM_PROCID=2", "SLURM_LOCALID=0", "SLURMD_NODENAME=gpu-003", "SLURM_GPUS_ON_NODE=8",
}

func TestDetect(t *testing.T) {
	for _, tt := range []struct {
		name  string
		which string
		given string // a flag the user gave
		env   []string
		want  map[string]string // flag -> value; nil when nothing is detected
		hosts int
		gpus  int
		err   string
	}{
		{name: "no scheduler", env: []string{"HOME=/root"}},
		{name: "srun step on 4 nodes", env: srunStep, hosts: 4, gpus: 8, want: map[string]string{
			"nnodes": "4", "node-rank": "2", "rdzv-backend": "c10d", "rdzv-endpoint": "gpu-001:" + strconv.Itoa(StorePort("4242.0")),
			"master-addr": "gpu-001", "rdzv-id": "4242.0", "local-addr": "gpu-003"}},
		{name: "batch script on one node", env: []string{"SLURM_JOB_ID=7", "SLURM_NNODES=1", "SLURM_JOB_NODELIST=n1", "SLURM_NODEID=0"},
			hosts: 1, want: map[string]string{"nnodes": "1", "node-rank": "0", "rdzv-id": "7", "local-addr": "n1"}},
		{name: "batch script on 4 nodes", env: []string{"SLURM_JOB_ID=7", "SLURM_NNODES=4", "SLURM_JOB_NODELIST=n[1-4]", "SLURM_NODEID=0", "ENVIRONMENT=BATCH"},
			err: "the batch script of a 4-node Slurm job"},
		{name: "salloc shell of 2 nodes", env: []string{"SLURM_JOB_ID=7", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=n[1-2]"},
			err: "the shell of a 2-node Slurm allocation (salloc"},
		// --nnodes given outside a step: a job of this host's own (salloc's
		// shell runs on the submit host, none of the allocation's nodes).
		{name: "batch script on 4 nodes, --nnodes given", env: []string{"SLURM_JOB_ID=7", "SLURM_NNODES=4", "SLURM_JOB_NODELIST=n[1-4]", "SLURM_NODEID=0", "ENVIRONMENT=BATCH"},
			given: "nnodes", want: map[string]string{"rdzv-id": "7"}},
		{name: "salloc shell of 2 nodes, --nnodes given", env: []string{"SLURM_JOB_ID=7", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=n[1-2]", "SLURM_GPUS_ON_NODE=4"},
			given: "nnodes", want: map[string]string{"rdzv-id": "7"}},
		{name: "two tasks on another node (srun -N2 -n3)", env: append(append([]string{}, srunStep...), "SLURM_STEP_TASKS_PER_NODE=2,1(x3)"), err: "srun started 2 tasks on node 0 of the step"},
		{name: "two tasks on this node", env: append(append([]string{}, srunStep...), "SLURM_STEP_TASKS_PER_NODE=2(x4)"), err: "srun started 2 tasks on this node"},
		{name: "ntasks-per-node 8", env: []string{"SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_NNODES=1", "SLURM_NTASKS_PER_NODE=8"}, err: "SLURM_NTASKS_PER_NODE=8"},
		{name: "host list and node count disagree", env: []string{"SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_NNODES=3", "SLURM_JOB_NODELIST=n[1-2]", "SLURM_NODEID=0"}, err: "names 2 hosts"},
		{name: "bad host list", env: []string{"SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=n[1-2", "SLURM_NODEID=0"}, err: "SLURM_JOB_NODELIST"},
		{name: "node id out of range", env: []string{"SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=n[1-2]", "SLURM_NODEID=2"}, err: "SLURM_NODEID=2"},
		{name: "bad node count", env: []string{"SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_NNODES=two"}, err: "SLURM_NNODES=\"two\""},
		{name: "bad GPU count", env: []string{"SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_NNODES=1", "SLURM_GPUS_ON_NODE=x"}, err: "SLURM_GPUS_ON_NODE"},
		{name: "slurm asked, none there", which: Slurm, env: []string{"HOME=/"}, err: "SLURM_JOB_ID is not set"},
		{name: "slurm turned off", which: None, env: srunStep},
		{name: "PyTorchJob pod", env: []string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "MASTER_ADDR=job-master-0", "MASTER_PORT=23456",
			"PET_NNODES=2", "PET_NODE_RANK=1", "PET_NPROC_PER_NODE=8", "WORLD_SIZE=2", "RANK=1"},
			want: map[string]string{"master-addr": "job-master-0", "master-port": "23456"}},
		{name: "JobSet pod", env: []string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=3", "JOBSET_NAME=train",
			"MASTER_ADDR=train-workers-0-0.train"}, want: map[string]string{"master-addr": "train-workers-0-0.train", "node-rank": "3"}},
		{name: "JobSet pod of Job 2 of 4-pod Jobs", env: []string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=1",
			"GORUN_JOB_INDEX=2", "GORUN_PODS_PER_JOB=4"}, want: map[string]string{"node-rank": "9"}},
		{name: "JobSet job index without pods per job", env: []string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=1",
			"GORUN_JOB_INDEX=2"}, err: "needs GORUN_PODS_PER_JOB"},
		{name: "pod index beyond its Job's pods", env: []string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=4",
			"GORUN_JOB_INDEX=0", "GORUN_PODS_PER_JOB=4"}, err: "JOB_COMPLETION_INDEX=4 is not below GORUN_PODS_PER_JOB=4"},
		{name: "bad master port", env: []string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "MASTER_PORT=99999"}, err: "MASTER_PORT"},
		{name: "bad scheduler name", which: "pbs", err: "want auto, slurm"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			which := tt.which
			if which == "" {
				which = Auto
			}
			d, err := Detect(which, env(tt.env...), func(f string) bool { return f == tt.given })
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrScheduler) {
					t.Fatalf("Detect = %+v, %v; want an error saying %q", d, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Flags) != len(tt.want) {
				t.Errorf("settings %+v; want %v", d.Flags, tt.want)
			}
			for flag, v := range tt.want {
				if got, ok := d.Value(flag); !ok || got != v {
					t.Errorf("--%s = %q (%v); want %q", flag, got, ok, v)
				}
			}
			for _, s := range d.Flags {
				if s.Source == "" {
					t.Errorf("--%s has no source", s.Flag)
				}
			}
			if len(d.Hosts) != tt.hosts || d.GPUsOnNode != tt.gpus {
				t.Errorf("hosts %v, GPUs %d; want %d hosts, %d GPUs", d.Hosts, d.GPUsOnNode, tt.hosts, tt.gpus)
			}
		})
	}
}

func TestStorePort(t *testing.T) {
	seen := map[int]bool{}
	for job := range 200 {
		p := StorePort(strconv.Itoa(100000+job) + ".0")
		if p < 20000 || p > 29999 {
			t.Fatalf("StorePort = %d; want 20000-29999", p)
		}
		seen[p] = true
	}
	if len(seen) < 190 {
		t.Errorf("200 job ids gave %d ports: too many collisions", len(seen))
	}
	first, again, step := StorePort("4242.0"), StorePort("4242.0"), StorePort("4242.1")
	if first != again || first == step {
		t.Error("the port must follow the job and step ids")
	}
}

func TestSlurmJobStep(t *testing.T) {
	for _, tt := range []struct {
		name      string
		env       map[string]string
		job, step string
	}{
		{"outside Slurm", nil, "", ""},
		{"a batch script", map[string]string{"SLURM_JOB_ID": "42"}, "42", ""},
		{"a step", map[string]string{"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "3"}, "42", "3"},
		{"older spelling", map[string]string{"SLURM_JOB_ID": "42", "SLURM_STEPID": "0"}, "42", "0"},
		{"both: the newer wins", map[string]string{"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "1", "SLURM_STEPID": "2"}, "42", "1"},
	} {
		job, step := SlurmJobStep(func(k string) string { return tt.env[k] })
		if job != tt.job || step != tt.step {
			t.Errorf("%s: SlurmJobStep = %q, %q; want %q, %q", tt.name, job, step, tt.job, tt.step)
		}
	}
}
