package slurmtest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// End-to-end tests of gorun under a real Slurm with real PyTorch workers
// (examples/pytorch/train_ddp.py on Debian's python3-torch, gloo): the
// example batch script as a user submits it, and every way Slurm stops a
// job (docs/schedulers.md, "Stopping and preempting a job"). Each test
// starts its own cluster; run them alone with -run TestSlurmPy.

// TestSlurmPyExampleScript: examples/slurm/train.sbatch, unchanged, on 3
// nodes with 2 GPUs each: 6 ranks that end with identical parameters.
func TestSlurmPyExampleScript(t *testing.T) {
	t.Parallel()
	c := pyCluster(t, Options{Nodes: 3}, true)
	ctx := deadline(t, 5*time.Minute)
	start := time.Now()
	r := newPyExample(t, c).submit(ctx, t, []string{"--nodes=3", "--gpus-per-node=2"}, nil)
	state, exit := r.gone(ctx, t)
	all := strings.Join(r.outputs(), "\n")
	if !strings.Contains(all, "[default0]:parameters identical on all 6 ranks: True") {
		t.Errorf("job %s: rank 0 did not find the parameters identical on 6 ranks", r.id)
	}
	if state != "COMPLETED" || exit != "0:0" {
		t.Errorf("job %s ended %s with ExitCode=%s, want COMPLETED, 0:0", r.id, state, exit)
	}
	if n := len(r.outputs()); n != 3 {
		t.Errorf("job %s: %d node outputs, want 3", r.id, n)
	}
	t.Logf("train.sbatch on 3 nodes x 2 workers: %v from sbatch to the job's end", time.Since(start).Round(time.Millisecond))
}

// TestSlurmPyExampleWarningSignal: train.sbatch's `#SBATCH
// --signal=B:USR1@100` under --time=2 warns the batch shell, whose trap
// forwards SIGUSR1 to srun: the ranks save at an agreed step, every
// node's gorun and the script exit 75. A second run given the same
// checkpoint folder resumes from that step.
func TestSlurmPyExampleWarningSignal(t *testing.T) {
	t.Parallel()
	c := pyCluster(t, Options{Nodes: 2}, true)
	ctx := deadline(t, 8*time.Minute)
	e := newPyExample(t, c)
	start := time.Now()
	r := e.submit(ctx, t, []string{"--nodes=2", "--gpus-per-node=2", "--time=2"}, []string{"--steps", "100000", "--step-time", "0.05"})
	// The warning comes 20 s after the start whatever the job does: under
	// a loaded suite the workers' imports took most of that, and it came
	// at step 1. That training began is what counts.
	r.waitOutput(ctx, t, regexp.MustCompile(`\[default0\]:step 0 loss`))
	training := time.Since(start)
	state, exit := r.gone(ctx, t)
	took := time.Since(start)
	outs := r.outputs()
	ckpt := filepath.Join(e.root, "checkpoints", r.id)
	step := checkSaved(t, outs, 2, 4, ckpt)
	seen := signalsSeen(outs)
	t.Logf("job %s: training after %v, ended %s (ExitCode=%s) %v after sbatch, saved step %d; %s",
		r.id, training.Round(time.Millisecond), state, exit, took.Round(time.Millisecond), step, seen)
	if exit != "75:0" {
		t.Errorf("job %s: the batch script ended with ExitCode=%s, want 75:0 (srun's 75)", r.id, exit)
	}
	srunExited(t, r.batchOutput(), c.Nodes(), 75)
	if state == "TIMEOUT" || !strings.Contains(seen, "request: SIGUSR1") {
		t.Errorf("job %s (%s): no stop request of the warning's SIGUSR1 (the time limit's SIGTERM instead?): %s", r.id, state, seen)
	}
	if t.Failed() || step < 0 {
		return
	}
	// The script's own folder is checkpoints/$SLURM_JOB_ID, a new one for
	// a new job; its arguments come after its defaults, so a
	// --checkpoint of the first job's folder wins.
	r2 := e.submit(ctx, t, []string{"--nodes=2", "--gpus-per-node=2"},
		[]string{"--steps", strconv.Itoa(step + 20), "--step-time", "0.05", "--checkpoint", filepath.Join("checkpoints", r.id)})
	state, exit = r2.gone(ctx, t)
	all := strings.Join(r2.outputs(), "\n")
	if m := resumedRe.FindStringSubmatch(all); m == nil || m[1] != strconv.Itoa(step) {
		t.Errorf("job %s did not resume at step %d (%v)", r2.id, step, m)
	}
	if !strings.Contains(all, "[default0]:parameters identical on all 4 ranks: True") {
		t.Errorf("job %s: rank 0 did not find the parameters identical on 4 ranks", r2.id)
	}
	if state != "COMPLETED" || exit != "0:0" {
		t.Errorf("job %s ended %s with ExitCode=%s, want COMPLETED, 0:0", r2.id, state, exit)
	}
}

// TestSlurmPyScancel: scancel's ways to stop a running step reach gorun
// as a stop request: the ranks save at an agreed step, every node exits
// 75.
func TestSlurmPyScancel(t *testing.T) {
	t.Parallel()
	c := pyCluster(t, Options{Nodes: 2}, true)
	for _, tc := range []struct {
		name string
		args func(id string) []string
		// batchLives: the batch script is not signalled, and prints
		// srun's status.
		batchLives bool
	}{
		{"TERM", func(id string) []string { return []string{id} }, false},
		{"USR1", func(id string) []string { return []string{"--signal=USR1", id} }, true},
		{"USR1-step", func(id string) []string { return []string{"--signal=USR1", id + ".0"} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := deadline(t, 4*time.Minute)
			r, ckpt := pyJob(ctx, t, c, 2)
			r.waitTraining(ctx, t)
			asked := time.Now()
			if err := c.Scancel(ctx, tc.args(r.id)...); err != nil {
				t.Fatal(err)
			}
			state, exit := r.gone(ctx, t)
			outs := r.outputs()
			step := checkSaved(t, outs, 2, 4, ckpt)
			if tc.batchLives {
				if !strings.Contains(r.batchOutput(), "srun exited 75") {
					t.Errorf("job %s: the batch script's srun did not exit 75", r.id)
				}
				srunExited(t, r.batchOutput(), c.Nodes(), 75)
			}
			t.Logf("scancel %s: job %s ended %s (ExitCode=%s) %v later, saved step %d; %s",
				strings.Join(tc.args(r.id), " "), r.id, state, exit, time.Since(asked).Round(time.Millisecond), step, signalsSeen(outs))
		})
	}
}

// TestSlurmPyTimeLimit: at a job's time limit Slurm sends SIGTERM to
// every process of the job (SIGKILL KillWait, 30 s, later): the ranks
// save, every node exits 75.
func TestSlurmPyTimeLimit(t *testing.T) {
	t.Parallel()
	c := pyCluster(t, Options{Nodes: 2}, true)
	ctx := deadline(t, 5*time.Minute)
	start := time.Now()
	r, ckpt := pyJob(ctx, t, c, 2, "--time=1")
	r.waitTraining(ctx, t)
	state, exit := r.gone(ctx, t)
	outs := r.outputs()
	step := checkSaved(t, outs, 2, 4, ckpt)
	if state != "TIMEOUT" {
		t.Errorf("job %s ended %s, want TIMEOUT", r.id, state)
	}
	t.Logf("job %s ended %s (ExitCode=%s) %v after sbatch, saved step %d; %s",
		r.id, state, exit, time.Since(start).Round(time.Millisecond), step, signalsSeen(outs))
}

// TestSlurmPyPreemptedByHigherPriority: a job of the high partition that
// needs the nodes preempts the PyTorch job: the ranks save, every node
// exits 75. Three partitions of PriorityTier 1: one that cancels at once
// (PreemptMode=CANCEL, no GraceTime: the job's processes get SIGTERM,
// SIGKILL KillWait later), the harness's "low" with a GraceTime of 30 s
// (SIGTERM at once, the job cancelled 30 s later), and one with
// PreemptMode=REQUEUE, which requeues the job (same job id, same
// checkpoint folder): it resumes at the saved step. Slurm holds a
// requeued job until the old step credential has expired (its BeginTime,
// AuthInfo's cred_expire, 120 s by default; 30 s here), and its main
// scheduler may take up to a minute more to start it.
func TestSlurmPyPreemptedByHigherPriority(t *testing.T) {
	t.Parallel()
	const cancel, requeue = "lowcancel", "lowrq"
	c := pyCluster(t, Options{Nodes: 2, GraceTime: 30 * time.Second, CredExpire: 30 * time.Second, ExtraConf: []string{
		"PartitionName=" + cancel + " Nodes=ALL Default=NO PriorityTier=1 MaxTime=INFINITE State=UP PreemptMode=CANCEL",
		"PartitionName=" + requeue + " Nodes=ALL Default=NO PriorityTier=1 MaxTime=INFINITE State=UP PreemptMode=REQUEUE",
	}}, true)
	for _, tc := range []struct {
		name, partition string
		// state is the job's end state ("": requeued, runs again);
		// batchLives: the batch script is not signalled and prints
		// srun's status (a job that ends within its GraceTime ends
		// COMPLETED).
		state      string
		batchLives bool
	}{
		{"cancel", cancel, "PREEMPTED", false},
		{"cancel-grace", PartitionLow, "COMPLETED", true},
		{"requeue", requeue, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := deadline(t, 6*time.Minute)
			r, ckpt := pyJob(ctx, t, c, 2, "-p", tc.partition)
			r.waitTraining(ctx, t)
			asked := time.Now()
			high, err := c.Sbatch(ctx, "#!/bin/sh\nsrun hostname\n", "-p", PartitionHigh, "-N2", "--exclusive")
			if err != nil {
				t.Fatal(err)
			}
			if tc.state != "" {
				state, exit := r.gone(ctx, t)
				outs := r.outputs()
				step := checkSaved(t, outs, 2, 4, ckpt)
				if state != tc.state {
					t.Errorf("job %s ended %s, want %s", r.id, state, tc.state)
				}
				if tc.batchLives && !strings.Contains(r.batchOutput(), "srun exited 75") {
					t.Errorf("job %s: the batch script's srun did not exit 75", r.id)
				}
				t.Logf("job %s ended %s (ExitCode=%s) %v after the high job's sbatch, saved step %d; %s",
					r.id, state, exit, time.Since(asked).Round(time.Millisecond), step, signalsSeen(outs))
			} else {
				// The requeued job runs again under the same id, with the
				// same checkpoint folder; each node's output is appended to.
				wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
				defer cancel()
				if !r.sawOutput(wctx, resumedRe) {
					t.Fatalf("job %s: no %q in the nodes' outputs 3 min after the high job's sbatch at %s (Restarts=%s EligibleTime=%s StartTime=%s, now %s)",
						r.id, resumedRe, asked.Format("15:04:05"), r.field(ctx, t, "Restarts"), r.field(ctx, t, "EligibleTime"),
						r.field(ctx, t, "StartTime"), time.Now().Format("15:04:05"))
				}
				resumed := time.Since(asked)
				var outs []string
				for _, o := range r.outputs() {
					outs = append(outs, firstRun(o))
				}
				step := checkSaved(t, outs, 2, 4, ckpt)
				m := resumedRe.FindStringSubmatch(strings.Join(r.outputs(), "\n"))
				if m[1] != strconv.Itoa(step) {
					t.Errorf("job %s resumed at step %s, saved step %d", r.id, m[1], step)
				}
				t.Logf("job %s: saved step %d (%s), resumed at step %s %v after the high job's sbatch at %s (Restarts=%s EligibleTime=%s StartTime=%s)",
					r.id, step, signalsSeen(outs), m[1], resumed.Round(time.Millisecond), asked.Format("15:04:05"),
					r.field(ctx, t, "Restarts"), r.field(ctx, t, "EligibleTime"), r.field(ctx, t, "StartTime"))
				if err := c.Scancel(ctx, r.id); err != nil {
					t.Fatal(err)
				}
				r.gone(ctx, t)
			}
			if state, err := c.WaitJobGone(ctx, high); err != nil || state != "COMPLETED" {
				t.Errorf("the high job %s: %s, %v", high, state, err)
			}
		})
	}
}

// TestSlurmPySallocOneNode: in salloc's shell (on the submit host, none
// of the allocation's nodes) `gorun --nnodes=1` is a job of this host
// alone, whose master is this host; without --nnodes a multi-node line is
// refused, naming salloc's shell.
func TestSlurmPySallocOneNode(t *testing.T) {
	t.Parallel()
	c := pyCluster(t, Options{Nodes: 2}, false)
	gorun, hello := filepath.Join(c.BinDir(), "gorun"), filepath.Join(c.BinDir(), "hello")

	ctx := deadline(t, 2*time.Minute)
	start := time.Now()
	out, stderr, err := Output(c.Command(ctx, "salloc", "-N2", gorun, "--nnodes=1", "--nproc-per-node=2", "--no-python", hello))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	t.Logf("salloc -N2 gorun --nnodes=1: %v", took.Round(time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("gorun --nnodes=1 in salloc took %v, want well under 60 s", took.Round(time.Millisecond))
	}
	masters := regexp.MustCompile(`rank \d+ of 2 \(local rank \d+\), master (\S+):\d+,`).FindAllStringSubmatch(out, -1)
	if len(masters) != 2 {
		t.Fatalf("want 2 workers of a world of 2:\nstdout:\n%s\nstderr:\n%s", out, stderr)
	}
	for _, m := range masters {
		t.Logf("a worker's master: %s", m[1])
		if !isLocalHost(m[1]) {
			t.Errorf("a worker's master is %s, not this host (the allocation's first node is %s, %s):\n%s\n%s", m[1], c.Nodes()[0], c.Addr(0), out, stderr)
		}
	}

	start = time.Now()
	out, stderr, err = Output(c.Command(ctx, "salloc", "-N2", gorun, "--nproc-per-node=2", "--no-python", hello))
	took = time.Since(start)
	if err == nil {
		t.Fatalf("gorun without --nnodes in a 2-node salloc succeeded:\n%s\n%s", out, stderr)
	}
	if !strings.Contains(stderr, "salloc") || !strings.Contains(stderr, "shell") || strings.Contains(stderr, "batch script") {
		t.Errorf("the refusal does not name salloc's shell (or names a batch script):\n%s", stderr)
	}
	if strings.Contains(out, "rank 0 of") {
		t.Errorf("a worker started:\n%s", out)
	}
	t.Logf("refused in %v: %s", took.Round(time.Millisecond), lineWith(stderr, "shell"))
}

// isLocalHost reports whether host (a name or an address) is this host:
// every address it has is a loopback address or one of this network
// namespace's.
func isLocalHost(host string) bool {
	addrs, err := net.LookupHost(host)
	if err != nil || len(addrs) == 0 {
		return false
	}
	mine, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ip := net.ParseIP(a)
		if ip == nil {
			return false
		}
		local := ip.IsLoopback()
		for _, m := range mine {
			if n, ok := m.(*net.IPNet); ok && n.IP.Equal(ip) {
				local = true
			}
		}
		if !local {
			return false
		}
	}
	return true
}

// lineWith is the first line of s that holds sub.
func lineWith(s, sub string) string {
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// TestSlurmPyUnevenGPUs: `srun -N2 --gpus=3` gives one node 2 GPUs and
// the other 1, so --nproc-per-node=gpu starts 2 workers on one and 1 on
// the other: one job of 3 workers, as torchrun forms it from nodes of
// different worker counts.
func TestSlurmPyUnevenGPUs(t *testing.T) {
	t.Parallel()
	c := pyCluster(t, Options{Nodes: 2}, true)
	ctx := deadline(t, 3*time.Minute)
	script := fmt.Sprintf(`echo "gpus on $SLURMD_NODENAME: ${SLURM_GPUS_ON_NODE-unset}"; exec %s/gorun --nproc-per-node=gpu %s/examples/pytorch/train_ddp.py --steps 20`,
		c.BinDir(), c.root)
	cmd := pyCommand(ctx, c, "srun", "-N2", "--gpus=3", "--ntasks-per-node=1", "--label", "bash", "-c", script)
	cmd.Env = append(cmd.Env, "GORUN_RDZV_TOKEN="+Token(t))
	out, stderr, err := Output(cmd)
	t.Logf("srun -N2 --gpus=3 (%s):\nstdout:\n%s\nstderr:\n%s", cmd.ProcessState, out, stderr)
	gpus := regexp.MustCompile(`(?m)^(\d+): gpus on \S+: (\S+)$`).FindAllStringSubmatch(out, -1)
	if len(gpus) != 2 || gpus[0][2] == gpus[1][2] {
		t.Fatalf("Slurm did not give the nodes different GPU counts: %v", gpus)
	}
	if err != nil || !strings.Contains(out, "parameters identical on all 3 ranks: True") || !strings.Contains(out, "world=3") {
		t.Errorf("the job of 2 + 1 workers did not run as one world of 3: %v", err)
	}
}
