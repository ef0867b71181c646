package slurmtest

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// stop removes everything the cluster started; it fails the test if a
// process of the cluster is left.
func (c *Cluster) stop() {
	t := c.t
	start := time.Now()
	defer func() {
		t.Logf("slurm test cluster %s removed in %v", c.name, time.Since(start).Round(time.Millisecond))
	}()
	if t.Failed() {
		t.Logf("slurm test cluster %s:%s", c.name, c.logs())
	}
	if c.ctld != nil && !c.ctld.exited() {
		c.cancelJobs()
	}
	// What still runs on the nodes but their slurmd (a job that ignores
	// SIGTERM): a slurmd whose job steps still run waits for them before it
	// ends at SIGTERM.
	if left := killAll(c.stepProcesses, 10*time.Second); len(left) > 0 {
		t.Errorf("slurm test cluster %s: job processes left after SIGKILL: %v", c.name, left)
	}
	// The slurmds before slurmctld: a slurmd that ends tells slurmctld its
	// jobs' epilogs are done, and retries for seconds if it cannot.
	stuck := stopDaemons(10*time.Second, c.slurmds...)
	if c.ctld != nil {
		stuck = append(stuck, stopDaemons(10*time.Second, c.ctld)...)
	}
	for _, s := range stuck {
		t.Errorf("slurm test cluster %s: %s did not end after SIGKILL", c.name, s)
	}
	if c.munged != nil {
		for _, s := range stopDaemons(5*time.Second, c.munged) {
			t.Errorf("slurm test cluster %s: %s did not end after SIGKILL", c.name, s)
		}
	}
	// Anything else of the cluster's (slurmctld's slurmscriptd, a client
	// that a test left running) is killed; what is left even then fails
	// the test.
	if left := killAll(c.marks.scan, 10*time.Second); len(left) > 0 {
		t.Errorf("slurm test cluster %s: processes left after cleanup: %v", c.name, left)
	}
}

// stepProcesses are the processes on every node but their slurmd.
func (c *Cluster) stepProcesses() []Process {
	var ps []Process
	for i := range c.nodes {
		ps = append(ps, c.Processes(i)...)
	}
	return ps
}

// cancelJobs cancels every job and gives them 3 s to end. Jobs that end
// at SIGTERM end now; the others (KillWait is 30 s) are killed with
// everything else once the daemons are down.
func (c *Cluster) cancelJobs() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	jobs := func() []string {
		out, err := c.Command(ctx, "squeue", "-h", "-o", "%A").Output()
		if err != nil {
			return nil
		}
		return strings.Fields(string(out))
	}
	ids := jobs()
	if len(ids) == 0 {
		return
	}
	_ = c.Command(ctx, "scancel", ids...).Run()
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	_ = c.poll(wctx, "jobs to end", nil, func() bool { return len(jobs()) == 0 })
}

// logs is the end of each daemon's output (its stderr, which has what its
// log file has and what it printed before it had one), for a failed test.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, d := range append([]*daemon{c.munged, c.ctld}, c.slurmds...) {
		if d != nil {
			fmt.Fprintf(&b, "\n--- %s (%s):\n%s", d.name, d.out, tail(d.out, 40))
		}
	}
	return b.String()
}
