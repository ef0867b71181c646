package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// dryRunWorkers runs the gorun command line argv (argv[0] is "gorun")
// with --dry-run --format=json under env and returns each worker's rank
// and the environment gorun gives it.
func dryRunWorkers(t *testing.T, env, argv []string) []map[string]string {
	t.Helper()
	if len(argv) == 0 || argv[0] != "gorun" {
		t.Fatalf("not a gorun command: %q", argv)
	}
	args := append([]string{"--dry-run", "--format=json"}, argv[1:]...)
	r := runGorun(t, testEnv(env...), args...)
	if r.code != 0 {
		t.Fatalf("gorun %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	var dry struct {
		Workers []struct {
			Added []struct{ Name, Value string } `json:"env"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &dry); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	var out []map[string]string
	for _, w := range dry.Workers {
		m := map[string]string{}
		for _, v := range w.Added {
			m[v.Name] = v.Value
		}
		out = append(out, m)
	}
	return out
}

// checkWorkers compares the first worker's environment with want.
func checkWorkers(t *testing.T, what string, workers []map[string]string, nproc int, want map[string]string) {
	t.Helper()
	if len(workers) != nproc {
		t.Fatalf("%s: %d workers; want %d", what, len(workers), nproc)
	}
	for k, v := range want {
		if workers[0][k] != v {
			t.Errorf("%s: %s=%q; want %q", what, k, workers[0][k], v)
		}
	}
}

// TestSlurmExample: the gorun command of examples/slurm/train.sbatch,
// under the variables srun sets on node 2 of the script's 4 nodes, makes
// the job the script describes.
func TestSlurmExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../examples/slurm/train.sbatch")
	if err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(string(b), "\\\n", " ")
	line := regexp.MustCompile(`(?m)^srun .*$`).FindString(script)
	line = strings.TrimSuffix(strings.TrimSpace(line), "&") // run in the background, for the trap
	argv := strings.Fields(line[strings.Index(line, "gorun "):])
	for _, kv := range []string{"--nodes=4", "--ntasks-per-node=1", "--gpus-per-node=8"} {
		if !strings.Contains(script, "#SBATCH "+kv) {
			t.Fatalf("the script lost #SBATCH %s", kv)
		}
	}
	env := append(slurmEnv("5150", 4, 2), "SLURM_GPUS_ON_NODE=8", "SLURMD_NODENAME=gpu-003",
		"SLURM_STEP_NODELIST=gpu-[001-004]", "SLURM_JOB_NODELIST=gpu-[001-004]")
	workers := dryRunWorkers(t, env, argv)
	checkWorkers(t, "train.sbatch", workers, 8, map[string]string{
		"RANK": "16", "GROUP_RANK": "2", "WORLD_SIZE": "32", "GROUP_WORLD_SIZE": "4",
		"TORCHELASTIC_RUN_ID": "5150.0", "TORCHELASTIC_MAX_RESTARTS": "3",
	})
}

// kubeContainer is a manifest's container: its command and variables
// (ValueFrom set for those the downward API or a Secret gives).
type kubeContainer struct {
	Command []string `yaml:"command"`
	Env     []struct {
		Name, Value string
		ValueFrom   map[string]any `yaml:"valueFrom"`
	}
}

type kubePodTemplate struct {
	Spec struct{ Containers []kubeContainer } `yaml:"spec"`
}

// readManifest reads examples/kubernetes/name into v.
func readManifest(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile("../../examples/kubernetes/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// pytorchJob is what the tests read of a PyTorchJob manifest.
type pytorchJob struct {
	Metadata struct{ Name string }
	Spec     struct {
		NprocPerNode  string `yaml:"nprocPerNode"`
		ElasticPolicy *struct {
			MinReplicas int `yaml:"minReplicas"`
			MaxReplicas int `yaml:"maxReplicas"`
			MaxRestarts int `yaml:"maxRestarts"`
		} `yaml:"elasticPolicy"`
		Replicas map[string]struct {
			Replicas int
			Template kubePodTemplate
		} `yaml:"pytorchReplicaSpecs"`
	}
}

// TestKubernetesExamples: the containers of examples/kubernetes, under
// the variables their controllers set (the training operator v1's
// setPodEnv for a PyTorchJob: MASTER_*, PET_MASTER_*, PET_NNODES,
// PET_NODE_RANK, PET_NPROC_PER_NODE, WORLD_SIZE = replicas x nprocPerNode,
// RANK, PYTHONUNBUFFERED=1; Kubernetes' indexed Job and the manifest's
// downward API for a JobSet), make the job the manifest describes on
// every pod.
func TestKubernetesExamples(t *testing.T) {
	t.Parallel()
	var job pytorchJob
	readManifest(t, "pytorchjob.yaml", &job)
	nodes := job.Spec.Replicas["Master"].Replicas + job.Spec.Replicas["Worker"].Replicas
	nproc, _ := strconv.Atoi(job.Spec.NprocPerNode)
	if nodes != 4 || nproc != 8 {
		t.Fatalf("pytorchjob.yaml: %d pods of %d workers; the test expects 4 of 8", nodes, nproc)
	}
	master := job.Metadata.Name + "-master-0"
	for rank := range nodes {
		kind := "Worker"
		if rank == 0 {
			kind = "Master"
		}
		c := job.Spec.Replicas[kind].Template.Spec.Containers[0]
		env := []string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "PYTHONUNBUFFERED=1",
			"MASTER_ADDR=" + master, "MASTER_PORT=23456", "PET_MASTER_ADDR=" + master, "PET_MASTER_PORT=23456",
			"PET_NNODES=" + strconv.Itoa(nodes), "PET_NODE_RANK=" + strconv.Itoa(rank), "PET_NPROC_PER_NODE=" + job.Spec.NprocPerNode,
			"WORLD_SIZE=" + strconv.Itoa(nodes*nproc), "RANK=" + strconv.Itoa(rank)}
		workers := dryRunWorkers(t, env, c.Command)
		checkWorkers(t, "pytorchjob.yaml "+kind, workers, nproc, map[string]string{
			"RANK": strconv.Itoa(rank * nproc), "WORLD_SIZE": strconv.Itoa(nodes * nproc), "GROUP_RANK": strconv.Itoa(rank),
			"MASTER_ADDR": master, "MASTER_PORT": "23456",
		})
	}

	var set struct {
		Metadata struct{ Name string }
		Spec     struct {
			ReplicatedJobs []struct {
				Name     string
				Replicas int
				Template struct {
					Spec struct {
						Completions int
						Template    kubePodTemplate
					}
				}
			} `yaml:"replicatedJobs"`
		}
	}
	readManifest(t, "jobset.yaml", &set)
	rj := set.Spec.ReplicatedJobs[0]
	pods := rj.Template.Spec.Completions
	if rj.Replicas < 2 {
		t.Fatalf("jobset.yaml: %d Jobs; the test expects several (their pods' indexes collide)", rj.Replicas)
	}
	c := rj.Template.Spec.Template.Spec.Containers[0]
	for jobIndex := range rj.Replicas {
		// The downward API gives the Job's index label.
		var manifest []string
		for _, e := range c.Env {
			v := e.Value
			if e.ValueFrom != nil {
				if !strings.Contains(fmt.Sprint(e.ValueFrom), "jobset.sigs.k8s.io/job-global-index") {
					t.Fatalf("jobset.yaml: %s comes from %v", e.Name, e.ValueFrom)
				}
				v = strconv.Itoa(jobIndex)
			}
			manifest = append(manifest, e.Name+"="+v)
		}
		for index := range pods {
			// Kubernetes adds JOB_COMPLETION_INDEX; the node's GPUs are 8
			// (the probe finds none here: --nproc-per-node=gpu is given 8
			// as the GPU probe would).
			env := append([]string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=" + strconv.Itoa(index), "GORUN_NPROC_PER_NODE=8"}, manifest...)
			cmd := slicesWithout(c.Command, "--nproc-per-node=gpu")
			workers := dryRunWorkers(t, env, cmd)
			node := jobIndex*pods + index
			checkWorkers(t, fmt.Sprintf("jobset.yaml Job %d pod %d", jobIndex, index), workers, 8, map[string]string{
				"RANK": strconv.Itoa(node * 8), "WORLD_SIZE": strconv.Itoa(rj.Replicas * pods * 8), "GROUP_RANK": strconv.Itoa(node),
				"MASTER_ADDR": set.Metadata.Name + "-" + rj.Name + "-0-0." + set.Metadata.Name, "MASTER_PORT": "29500",
			})
		}
	}
}

// TestKubernetesElasticExample: the elastic PyTorchJob of
// examples/kubernetes, under the variables the training operator's
// elastic policy sets (PET_RDZV_BACKEND=c10d, PET_RDZV_ENDPOINT at the
// first worker, PET_NNODES=MIN:MAX, PET_MAX_RESTARTS) and the token its
// Secret gives, forms one job of two pods (run for real, one worker
// each, the service name replaced by this host's address); a pod without
// the Secret's token is refused at once, naming the Secret.
func TestKubernetesElasticExample(t *testing.T) {
	t.Parallel()
	var job pytorchJob
	readManifest(t, "pytorchjob-elastic.yaml", &job)
	ep := job.Spec.ElasticPolicy
	if ep == nil || ep.MinReplicas != 2 {
		t.Fatalf("pytorchjob-elastic.yaml: elastic policy %+v; the test expects a minimum of 2", ep)
	}
	c := job.Spec.Replicas["Worker"].Template.Spec.Containers[0]
	token := ""
	for _, e := range c.Env {
		if e.Name == "GORUN_RDZV_TOKEN" && strings.Contains(fmt.Sprint(e.ValueFrom), "secretKeyRef") {
			token = "0123456789abcdef0123456789abcdef" // what the Secret holds
		}
	}
	if token == "" {
		t.Fatal("pytorchjob-elastic.yaml: no GORUN_RDZV_TOKEN from a Secret")
	}
	dir := t.TempDir()
	script := writeScript(t, `echo "$RANK $WORLD_SIZE $GROUP_RANK" > "$1/rank.$RANK"`)
	port := freePort(t, "127.0.0.1")
	operator := func(withToken bool) []string {
		env := append(proctest.GorunEnv(), "HOME="+t.TempDir(), "KUBERNETES_SERVICE_HOST=10.96.0.1", "PYTHONUNBUFFERED=1",
			"PET_RDZV_BACKEND=c10d", fmt.Sprintf("PET_RDZV_ENDPOINT=127.0.0.1:%d", port),
			fmt.Sprintf("PET_NNODES=%d:%d", ep.MinReplicas, ep.MaxReplicas), "PET_MAX_RESTARTS="+strconv.Itoa(ep.MaxRestarts),
			// One worker per pod here, and a short last call: the round
			// closes once both pods joined, not after torchrun's 30 s.
			"PET_NPROC_PER_NODE=1", "PET_RDZV_CONF=last_call_timeout=1")
		if withToken {
			env = append(env, "GORUN_RDZV_TOKEN="+token)
		}
		return env
	}
	// The manifest's command, with the stand-in script for train_ddp.py.
	args := []string{"--no-python", script, dir}
	if len(c.Command) < 2 || c.Command[0] != "gorun" || c.Command[1] != "examples/pytorch/train_ddp.py" {
		t.Fatalf("pytorchjob-elastic.yaml: command %q; the test expects gorun examples/pytorch/train_ddp.py", c.Command)
	}
	r := runGorun(t, operator(false), args...)
	if r.code != 2 || !strings.Contains(r.stderr, "Secret") {
		t.Errorf("a pod without the token: exit %d; want 2, naming a Secret\n%s", r.code, r.stderr)
	}
	var pods []*node
	for range 2 {
		cmd, out, errb := startGorun(t, operator(true), args...)
		pods = append(pods, &node{cmd, out, errb})
	}
	for i, p := range pods {
		if code := waitExit(t, p.cmd); code != 0 {
			t.Fatalf("pod %d exit %d\n%s", i, code, p.stderr)
		}
	}
	for rank := range 2 {
		b, err := os.ReadFile(filepath.Join(dir, "rank."+strconv.Itoa(rank)))
		if err != nil || !strings.HasPrefix(string(b), strconv.Itoa(rank)+" 2 ") {
			t.Errorf("rank %d: %q, %v; want world size 2", rank, b, err)
		}
	}
}

// slicesWithout returns s without the elements equal to drop.
func slicesWithout(s []string, drop string) []string {
	var out []string
	for _, v := range s {
		if v != drop {
			out = append(out, v)
		}
	}
	return out
}
