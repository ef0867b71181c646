package slurmtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// Name is the cluster's name (ClusterName), also the prefix of its host
// names.
func (c *Cluster) Name() string { return c.name }

// Nodes are the nodes' names, which are also their host names.
func (c *Cluster) Nodes() []string { return append([]string(nil), c.nodes...) }

// Addr is node i's address.
func (c *Cluster) Addr(i int) string { return c.hosts.Addr(i) }

// ctlAddr is the bridge's address in this namespace, where slurmctld
// listens: nettest's hosts are 10.x.y.1 to n and the bridge 10.x.y.254.
func (c *Cluster) ctlAddr() string {
	a := c.hosts.Addr(0)
	return a[:strings.LastIndexByte(a, '.')] + ".254"
}

// Dir is a folder every node sees (they are one machine), readable by all;
// commands run in it, so an sbatch job's slurm-<id>.out lands there.
func (c *Cluster) Dir() string { return filepath.Join(c.dir, "work") }

// Conf is the path of the cluster's slurm.conf.
func (c *Cluster) Conf() string { return c.conf }

// BinDir is the repository's bin folder (`make build`), first on the PATH
// of every command the cluster runs.
func (c *Cluster) BinDir() string { return filepath.Join(c.root, "bin") }

// Env is the environment of the cluster's commands: this process's
// without a scheduler's, torchrun's or gorun's variables
// (proctest.GorunEnv), with SLURM_CONF set and BinDir first on PATH.
func (c *Cluster) Env() []string {
	env := []string{"SLURM_CONF=" + c.conf}
	path := "PATH=" + c.BinDir()
	for _, kv := range proctest.GorunEnv() {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path += ":" + v
			continue
		}
		env = append(env, kv)
	}
	return append(env, path)
}

// Command is a Slurm client (srun, sbatch, squeue...) or any command run in
// this namespace with the cluster's environment (Env), in Dir.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if p, ok := c.bins[name]; ok {
		name = p
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env, cmd.Dir = c.Env(), c.Dir()
	return cmd
}

// OnNode is argv run on node i: in its network namespace and its UTS
// namespace (its host name), with the cluster's environment.
func (c *Cluster) OnNode(ctx context.Context, i int, argv ...string) *exec.Cmd {
	args := []string{"--net=/run/netns/" + c.hosts.Namespace(i)}
	if i < len(c.slurmds) && !c.slurmds[i].exited() {
		args = append(args, "--uts=/proc/"+strconv.Itoa(c.slurmds[i].cmd.Process.Pid)+"/ns/uts")
	}
	cmd := exec.CommandContext(ctx, c.bins["nsenter"], append(append(args, "--"), argv...)...)
	cmd.Env, cmd.Dir = c.Env(), c.Dir()
	return cmd
}

// Output runs cmd and returns what it wrote to stdout and stderr; the
// error says how it ended, with its stderr.
func Output(cmd *exec.Cmd) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err = cmd.Run(); err != nil {
		err = fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(e.String()))
	}
	return o.String(), e.String(), err
}

// Srun runs srun with args and returns its stdout and stderr.
func (c *Cluster) Srun(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return Output(c.Command(ctx, "srun", args...))
}

// Sbatch submits script (its text, "#!/bin/sh\n#SBATCH ...") with sbatch's
// args and returns the job's id. Without -o, the job's output is
// Dir()/slurm-<id>.out.
func (c *Cluster) Sbatch(ctx context.Context, script string, args ...string) (jobID string, err error) {
	f, err := os.CreateTemp(c.Dir(), "job-*.sh")
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(script); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	out, _, err := Output(c.Command(ctx, "sbatch", append(append([]string{"--parsable"}, args...), f.Name())...))
	if err != nil {
		return "", err
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.Atoi(id); err != nil {
		return "", fmt.Errorf("sbatch printed %q, not a job id", out)
	}
	return id, nil
}

// Scancel runs scancel with args (job ids, --signal=...).
func (c *Cluster) Scancel(ctx context.Context, args ...string) error {
	_, _, err := Output(c.Command(ctx, "scancel", args...))
	return err
}

// JobState is the job's state as slurmctld has it (PENDING, RUNNING,
// COMPLETING, COMPLETED, CANCELLED, PREEMPTED, FAILED...), "" once
// slurmctld has forgotten the job (MinJobAge, 300 s, after its end).
func (c *Cluster) JobState(ctx context.Context, jobID string) (string, error) {
	out, stderr, err := Output(c.Command(ctx, "scontrol", "-o", "show", "job", jobID))
	if err != nil {
		if strings.Contains(stderr, "Invalid job id") {
			return "", nil
		}
		return "", err
	}
	for f := range strings.FieldsSeq(out) {
		if v, ok := strings.CutPrefix(f, "JobState="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("scontrol show job %s: no JobState in %q", jobID, out)
}

// ended reports whether a job in state has ended and released its nodes.
func ended(state string) bool {
	switch state {
	case "PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT":
		return false
	}
	return true // "" too: slurmctld has forgotten it
}

// WaitJobGone waits until the job has ended and its nodes have let it go
// (no longer COMPLETING), and returns its last state.
func (c *Cluster) WaitJobGone(ctx context.Context, jobID string) (string, error) {
	for {
		state, err := c.JobState(ctx, jobID)
		if err == nil && ended(state) {
			return state, nil
		}
		select {
		case <-ctx.Done():
			return state, fmt.Errorf("job %s still %s: %w", jobID, state, errors.Join(ctx.Err(), err))
		case <-time.After(100 * time.Millisecond): // polling with a deadline
		}
	}
}

// WaitJobState waits until the job is in state (RUNNING, say).
func (c *Cluster) WaitJobState(ctx context.Context, jobID, state string) error {
	for {
		got, err := c.JobState(ctx, jobID)
		if err == nil && got == state {
			return nil
		}
		if err == nil && ended(got) {
			return fmt.Errorf("job %s ended (%q) before it was %s", jobID, got, state)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %s is %s, not %s: %w", jobID, got, state, errors.Join(ctx.Err(), err))
		case <-time.After(100 * time.Millisecond): // polling with a deadline
		}
	}
}

// WaitNodesIdle waits until sinfo shows every node idle (and responding).
func (c *Cluster) WaitNodesIdle(ctx context.Context) error {
	var last string
	err := c.poll(ctx, "every node idle", c.slurmds, func() bool {
		out, _, err := Output(c.Command(ctx, "sinfo", "-h", "-N", "-p", PartitionLow, "-o", "%N %t"))
		if err != nil {
			last = err.Error()
			return false
		}
		last = strings.TrimSpace(out)
		idle := map[string]bool{}
		for l := range strings.Lines(out) {
			if f := strings.Fields(l); len(f) == 2 && f[1] == "idle" {
				idle[f[0]] = true
			}
		}
		for _, n := range c.nodes {
			if !idle[n] {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("%w; sinfo: %s", err, last)
	}
	return nil
}

// Processes are the processes running on node i, its slurmd apart: a
// job's slurmstepd and what the job started.
func (c *Cluster) Processes(i int) []Process {
	m := marks{namespaces: map[string]bool{netnsLink(c.hosts.Namespace(i)): true}}
	var ps []Process
	for _, p := range m.scan() {
		if i < len(c.slurmds) && p.PID == c.slurmds[i].cmd.Process.Pid {
			continue
		}
		ps = append(ps, p)
	}
	return ps
}

// Cut drops every packet to and from node i until Heal.
func (c *Cluster) Cut(t testing.TB, i int) { t.Helper(); c.hosts.Cut(t, i) }

// Heal ends a Cut.
func (c *Cluster) Heal(t testing.TB, i int) { t.Helper(); c.hosts.Heal(t, i) }

// Token is a job token for gorun's store (GORUN_RDZV_TOKEN): 64 hex
// digits.
func Token(t testing.TB) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// mknodNull makes a character device with /dev/null's numbers (1, 3).
func mknodNull(path string) error {
	const major, minor = 1, 3
	return syscall.Mknod(path, syscall.S_IFCHR|0o666, major<<8|minor)
}
