// Package scheduler reads what a cluster scheduler tells a launch through
// the environment: Slurm's job shape (nodes, this node's rank, the host
// list, the job and step ids, the GPUs on this node) and the values
// Kubernetes job controllers set (the Kubeflow training operator's
// PyTorchJob, JobSet and indexed Jobs). Flags the user gives always win;
// this package only says what it found and where (docs/schedulers.md).
package scheduler

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher"
)

// Names of the schedulers Detect knows, for --scheduler.
const (
	Auto       = "auto"
	Slurm      = "slurm"
	Kubernetes = "kubernetes"
	None       = "none"
)

// StorePort is the port of the embedded store on the first host of the
// Slurm job (and step) runID: one of 20000-29999 (below Linux's ephemeral
// ports), derived from the ids so that every node computes the same one
// and jobs that share a node rarely meet (a fixed port, torchrun's 29400,
// would make the second job's agents join the first job's store).
func StorePort(runID string) int {
	h := fnv.New32a()
	h.Write([]byte(runID))
	return 20000 + int(h.Sum32()%10000)
}

// ErrScheduler: the scheduler's environment does not describe a launch
// gorun can run (more than one task per node, a batch script on several
// nodes, values that disagree).
var ErrScheduler = errors.New("scheduler")

// Detection is what Detect found.
type Detection struct {
	// Scheduler is Slurm or Kubernetes; "" when neither was found.
	Scheduler string `json:"scheduler,omitempty"`
	// Flags are the flags' values it gave, in the order of the flags'
	// help (Overridden is the caller's to set).
	Flags []launcher.SchedulerFlag `json:"flags,omitempty"`
	// Hosts is the job's host list in node-rank order (Slurm).
	Hosts []string `json:"hosts,omitempty"`
	// StoreHosts are the hosts of the embedded store's three members, the
	// first three of Hosts, when the job has three nodes or more: a store
	// that survives the loss of any one of them.
	StoreHosts []string `json:"store_hosts,omitempty"`
	// StoreSource says where StoreHosts came from.
	StoreSource string `json:"store_source,omitempty"`
	// GPUsOnNode is the number of GPUs the scheduler gave this node, 0 if
	// it did not say; --nproc-per-node=gpu or auto use it.
	GPUsOnNode int `json:"gpus_on_node,omitempty"`
	// GPUsSource names the variable GPUsOnNode came from.
	GPUsSource string `json:"gpus_source,omitempty"`
}

// Value returns the value of flag's setting and whether there is one.
func (d Detection) Value(flag string) (string, bool) {
	for _, s := range d.Flags {
		if s.Flag == flag {
			return s.Value, true
		}
	}
	return "", false
}

// Detect reads the scheduler's environment through getenv. which is Auto
// (Slurm when SLURM_JOB_ID is set, else Kubernetes when
// KUBERNETES_SERVICE_HOST is), Slurm, Kubernetes or None. given reports
// the flags the user gave (nil: none), which some checks defer to. An
// error calls which the setting Scheduler (internal/setting).
func Detect(which string, getenv func(string) string, given func(flag string) bool) (Detection, error) {
	if given == nil {
		given = func(string) bool { return false }
	}
	switch which {
	case None:
		return Detection{}, nil
	case Slurm:
		if getenv("SLURM_JOB_ID") == "" {
			return Detection{}, fmt.Errorf("%w: --scheduler=slurm, but SLURM_JOB_ID is not set (run gorun inside an srun step)", ErrScheduler)
		}
		return detectSlurm(getenv, given)
	case Kubernetes:
		return detectKubernetes(getenv)
	case Auto, "":
		if getenv("SLURM_JOB_ID") != "" {
			return detectSlurm(getenv, given)
		}
		if getenv("KUBERNETES_SERVICE_HOST") != "" {
			return detectKubernetes(getenv)
		}
		return Detection{}, nil
	}
	return Detection{}, fmt.Errorf("%w: --scheduler=%q: want auto, slurm, kubernetes or none", ErrScheduler, which)
}

// first returns the first of names that is set, with its name.
func first(getenv func(string) string, names ...string) (value, name string) {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v, n
		}
	}
	return "", ""
}

// count parses a non-negative count named name.
func count(name, v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s=%q: want a whole number", ErrScheduler, name, v)
	}
	return n, nil
}

func detectSlurm(getenv func(string) string, given func(string) bool) (Detection, error) {
	d := Detection{Scheduler: Slurm}
	add := func(flag, value, source string) {
		d.Flags = append(d.Flags, launcher.SchedulerFlag{Flag: flag, Value: value, Source: source})
	}

	job := getenv("SLURM_JOB_ID")
	step, stepVar := first(getenv, "SLURM_STEP_ID", "SLURM_STEPID")
	nodesText, nodesVar := first(getenv, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
	if nodesVar == "" {
		return d, fmt.Errorf("%w: SLURM_JOB_ID=%s, but none of SLURM_STEP_NUM_NODES, SLURM_NNODES, SLURM_JOB_NUM_NODES is set", ErrScheduler, job)
	}
	nodes, err := count(nodesVar, nodesText)
	if err != nil {
		return d, err
	}
	if nodes < 1 {
		return d, fmt.Errorf("%w: %s=%d: want 1 or more", ErrScheduler, nodesVar, nodes)
	}
	if stepVar == "" && nodes > 1 {
		// The batch script runs on the allocation's first node; salloc's
		// shell on the host salloc was run on, often none of the
		// allocation's nodes.
		where := "the shell of a " + strconv.Itoa(nodes) + "-node Slurm allocation (salloc; no SLURM_STEP_ID)"
		if getenv("ENVIRONMENT") == "BATCH" {
			where = "the batch script of a " + strconv.Itoa(nodes) + "-node Slurm job (no SLURM_STEP_ID)"
		}
		if !given("nnodes") {
			return d, fmt.Errorf("%w: gorun runs in %s, so only this host would join: start it once on every node with `srun --ntasks-per-node=1 gorun ...` (or give --nnodes=1 to run on this host alone)", ErrScheduler, where)
		}
		// --nnodes given: a job of this host's own, whatever the
		// allocation's nodes are; only the run id is the allocation's.
		d.Flags = append(d.Flags, launcher.SchedulerFlag{Flag: "rdzv-id", Value: job, Source: "SLURM_JOB_ID=" + job + " (outside a step: " + where + ")"})
		return d, nil
	}
	nodeText, nodeVar := first(getenv, "SLURM_NODEID")
	node := 0
	if nodeVar != "" {
		if node, err = count(nodeVar, nodeText); err != nil {
			return d, err
		}
	}
	if node >= nodes {
		return d, fmt.Errorf("%w: SLURM_NODEID=%d, but %s=%d", ErrScheduler, node, nodesVar, nodes)
	}
	if err := oneTaskPerNode(getenv, node); err != nil {
		return d, err
	}

	list, listVar := first(getenv, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
	if listVar != "" {
		if d.Hosts, err = ExpandHostlist(list); err != nil {
			return d, fmt.Errorf("%w: %s: %v", ErrScheduler, listVar, err)
		}
		if len(d.Hosts) != nodes {
			return d, fmt.Errorf("%w: %s=%s names %d hosts, but %s=%d", ErrScheduler, listVar, list, len(d.Hosts), nodesVar, nodes)
		}
	} else if nodes > 1 {
		return d, fmt.Errorf("%w: a %d-node Slurm job without SLURM_STEP_NODELIST or SLURM_JOB_NODELIST: gorun cannot tell which host is first", ErrScheduler, nodes)
	}

	add("nnodes", strconv.Itoa(nodes), nodesVar+"="+nodesText)
	if nodeVar != "" {
		add("node-rank", strconv.Itoa(node), "SLURM_NODEID="+nodeText)
	}
	runID, runSource := job, "SLURM_JOB_ID="+job
	if stepVar != "" {
		runID, runSource = job+"."+step, runSource+", "+stepVar+"="+step
	}
	if nodes > 1 {
		firstHost := fmt.Sprintf("first host of %s=%s", listVar, list)
		add("rdzv-backend", "c10d", "a Slurm job on several nodes: the embedded store")
		add("rdzv-endpoint", fmt.Sprintf("%s:%d", d.Hosts[0], StorePort(runID)), firstHost+", port derived from the job id")
		add("master-addr", d.Hosts[0], firstHost)
	}
	if nodes >= 3 {
		d.StoreHosts = append([]string(nil), d.Hosts[:3]...)
		d.StoreSource = fmt.Sprintf("the first three hosts of %s=%s", listVar, list)
	}
	add("rdzv-id", runID, runSource)
	if name, nameVar := first(getenv, "SLURMD_NODENAME"); nameVar != "" {
		add("local-addr", name, "SLURMD_NODENAME="+name)
	} else if len(d.Hosts) > 0 {
		add("local-addr", d.Hosts[node], fmt.Sprintf("host %d of %s", node, listVar))
	}
	if gpus, gpusVar := first(getenv, "SLURM_GPUS_ON_NODE"); gpusVar != "" {
		if d.GPUsOnNode, err = count(gpusVar, gpus); err != nil {
			return d, err
		}
		d.GPUsSource = gpusVar + "=" + gpus
	}
	return d, nil
}

// oneTaskPerNode refuses an srun step with more than one task on this
// node: gorun is the one launch per node that starts the workers.
func oneTaskPerNode(getenv func(string) string, node int) error {
	how := "launch one gorun per node (`srun --ntasks-per-node=1 gorun --nproc-per-node=N ...`); gorun starts the node's N workers itself"
	if v, name := first(getenv, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"); name != "" {
		counts, err := ExpandTasksPerNode(v)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrScheduler, name, err)
		}
		if node < len(counts) && counts[node] > 1 {
			return fmt.Errorf("%w: %s=%s: srun started %d tasks on this node, so %d gorun agents would each start the workers: %s", ErrScheduler, name, v, counts[node], counts[node], how)
		}
		// Another node's agents refuse the job: every node says so at
		// once, instead of waiting for a store they would have hosted.
		for i, n := range counts {
			if n > 1 && name == "SLURM_STEP_TASKS_PER_NODE" {
				return fmt.Errorf("%w: %s=%s: srun started %d tasks on node %d of the step, whose gorun agents refuse to run; this node stops too: %s", ErrScheduler, name, v, n, i, how)
			}
		}
		if name == "SLURM_STEP_TASKS_PER_NODE" {
			return nil // the step's own count wins over the job's
		}
	}
	if v, name := first(getenv, "SLURM_NTASKS_PER_NODE"); name != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 1 {
			return fmt.Errorf("%w: SLURM_NTASKS_PER_NODE=%s: %s", ErrScheduler, v, how)
		}
	}
	return nil
}

func detectKubernetes(getenv func(string) string) (Detection, error) {
	d := Detection{Scheduler: Kubernetes}
	add := func(flag, value, source string) {
		d.Flags = append(d.Flags, launcher.SchedulerFlag{Flag: flag, Value: value, Source: source})
	}
	// The training operator's PyTorchJob sets MASTER_ADDR and MASTER_PORT
	// for the pod (its PET_MASTER_* and PET_* are gorun's flags' own
	// variables); JobSet users set them in the manifest.
	if v := strings.TrimSpace(getenv(workerenv.MasterAddr)); v != "" {
		add("master-addr", v, "MASTER_ADDR="+v)
	}
	if v := strings.TrimSpace(getenv(workerenv.MasterPort)); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 65535 {
			return d, fmt.Errorf("%w: MASTER_PORT=%q: want a port, 1 to 65535", ErrScheduler, v)
		}
		add("master-port", v, "MASTER_PORT="+v)
	}
	// An indexed Job's pod index is the node rank where nothing else
	// gives one. A JobSet of several Jobs numbers each Job's pods from 0:
	// the manifest hands over the Job's index (its label
	// jobset.sigs.k8s.io/job-global-index, through the downward API) and
	// the Job's pod count, and the node rank counts the Jobs before it.
	if v := strings.TrimSpace(getenv("JOB_COMPLETION_INDEX")); v != "" {
		idx, err := count("JOB_COMPLETION_INDEX", v)
		if err != nil {
			return d, err
		}
		rank, source := idx, "JOB_COMPLETION_INDEX="+v
		if jv := strings.TrimSpace(getenv(JobIndexEnv)); jv != "" {
			job, err := count(JobIndexEnv, jv)
			if err != nil {
				return d, err
			}
			pv := strings.TrimSpace(getenv(PodsPerJobEnv))
			pods, err := count(PodsPerJobEnv, pv)
			if err != nil || pods < 1 {
				return d, fmt.Errorf("%w: %s=%s needs %s, the pod count of each Job (its completions), at least 1 (got %q)", ErrScheduler, JobIndexEnv, jv, PodsPerJobEnv, pv)
			}
			if idx >= pods {
				return d, fmt.Errorf("%w: JOB_COMPLETION_INDEX=%d is not below %s=%d", ErrScheduler, idx, PodsPerJobEnv, pods)
			}
			rank = job*pods + idx
			source = fmt.Sprintf("%s=%d x %s=%d + JOB_COMPLETION_INDEX=%d", JobIndexEnv, job, PodsPerJobEnv, pods, idx)
		}
		add("node-rank", strconv.Itoa(rank), source)
	}
	return d, nil
}

// The variables through which a JobSet's manifest hands over a pod's Job
// index and each Job's pod count (detectKubernetes).
const (
	JobIndexEnv   = "GORUN_JOB_INDEX"
	PodsPerJobEnv = "GORUN_PODS_PER_JOB"
)

// SlurmJobStep is the Slurm job and step that getenv's environment runs
// in (SLURM_JOB_ID; SLURM_STEP_ID, or Slurm's older SLURM_STEPID): ""
// outside Slurm, and step "" outside a step (a batch script, salloc's
// shell).
func SlurmJobStep(getenv func(string) string) (job, step string) {
	job, _ = first(getenv, "SLURM_JOB_ID")
	step, _ = first(getenv, "SLURM_STEP_ID", "SLURM_STEPID")
	return job, step
}
