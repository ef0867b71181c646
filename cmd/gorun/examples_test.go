package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
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
	var plan struct {
		Workers []struct {
			Added []struct{ Name, Value string } `json:"env"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	var out []map[string]string
	for _, w := range plan.Workers {
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

// TestKubernetesExamples: the containers of examples/kubernetes, under
// the variables their controllers set (the training operator for a
// PyTorchJob; Kubernetes' indexed Job for a JobSet), make the job the
// manifest describes on every pod.
func TestKubernetesExamples(t *testing.T) {
	t.Parallel()
	type container struct {
		Command []string `yaml:"command"`
		Env     []struct{ Name, Value string }
	}
	type podTemplate struct {
		Spec struct{ Containers []container } `yaml:"spec"`
	}
	read := func(name string, v any) {
		b, err := os.ReadFile("../../examples/kubernetes/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}

	var job struct {
		Metadata struct{ Name string }
		Spec     struct {
			NprocPerNode string `yaml:"nprocPerNode"`
			Replicas     map[string]struct {
				Replicas int
				Template podTemplate
			} `yaml:"pytorchReplicaSpecs"`
		}
	}
	read("pytorchjob.yaml", &job)
	nodes := job.Spec.Replicas["Master"].Replicas + job.Spec.Replicas["Worker"].Replicas
	nproc, _ := strconv.Atoi(job.Spec.NprocPerNode)
	if nodes != 4 || nproc != 8 {
		t.Fatalf("pytorchjob.yaml: %d pods of %d workers; the test expects 4 of 8", nodes, nproc)
	}
	for rank := range nodes {
		kind := "Worker"
		if rank == 0 {
			kind = "Master"
		}
		c := job.Spec.Replicas[kind].Template.Spec.Containers[0]
		// What the training operator adds to pod `rank`.
		env := []string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "MASTER_ADDR=" + job.Metadata.Name + "-master-0", "MASTER_PORT=23456",
			"PET_NNODES=" + strconv.Itoa(nodes), "PET_NODE_RANK=" + strconv.Itoa(rank), "PET_NPROC_PER_NODE=" + job.Spec.NprocPerNode,
			"WORLD_SIZE=" + strconv.Itoa(nodes), "RANK=" + strconv.Itoa(rank), "PYTHONUNBUFFERED=0"}
		workers := dryRunWorkers(t, env, c.Command)
		checkWorkers(t, "pytorchjob.yaml "+kind, workers, nproc, map[string]string{
			"RANK": strconv.Itoa(rank * nproc), "WORLD_SIZE": strconv.Itoa(nodes * nproc), "GROUP_RANK": strconv.Itoa(rank),
			"MASTER_ADDR": "gorun-ddp-master-0", "MASTER_PORT": "23456",
		})
	}

	var set struct {
		Metadata struct{ Name string }
		Spec     struct {
			ReplicatedJobs []struct {
				Name     string
				Template struct {
					Spec struct {
						Completions int
						Template    podTemplate
					}
				}
			} `yaml:"replicatedJobs"`
		}
	}
	read("jobset.yaml", &set)
	rj := set.Spec.ReplicatedJobs[0]
	c := rj.Template.Spec.Template.Spec.Containers[0]
	var manifest []string
	for _, e := range c.Env {
		manifest = append(manifest, e.Name+"="+e.Value)
	}
	for index := range rj.Template.Spec.Completions {
		// Kubernetes adds JOB_COMPLETION_INDEX; the node's GPUs are 8 (the
		// probe finds none here: --nproc-per-node=gpu is given 8 as the
		// GPU probe would).
		env := append([]string{"KUBERNETES_SERVICE_HOST=10.96.0.1", "JOB_COMPLETION_INDEX=" + strconv.Itoa(index), "GORUN_NPROC_PER_NODE=8"}, manifest...)
		cmd := slicesWithout(c.Command, "--nproc-per-node=gpu")
		workers := dryRunWorkers(t, env, cmd)
		checkWorkers(t, "jobset.yaml pod "+strconv.Itoa(index), workers, 8, map[string]string{
			"RANK": strconv.Itoa(index * 8), "WORLD_SIZE": strconv.Itoa(rj.Template.Spec.Completions * 8), "GROUP_RANK": strconv.Itoa(index),
			"MASTER_ADDR": set.Metadata.Name + "-" + rj.Name + "-0-0." + set.Metadata.Name, "MASTER_PORT": "29500",
		})
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
