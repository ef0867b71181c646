package torchrun_compat

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
)

// c10dArgs are the flags of one agent of a c10d job on this host whose
// store listens on the free port ep: no token anywhere, as torchrun runs
// it (gorun shares one through the agents' common home folder).
func c10dArgs(nnodes, ep, id string, more ...string) []string {
	return append([]string{"--nnodes=" + nnodes, "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:" + ep, "--rdzv-id=" + id}, more...)
}

// launchAgents runs one launch per job at once, as the agents of one job
// on this host, and waits for all of them.
func launchAgents(t *testing.T, l launcher, jobs []job) []outcome {
	t.Helper()
	home := t.TempDir()
	var rs []*running
	for _, j := range jobs {
		j.home = home
		rs = append(rs, l.start(t, j))
	}
	var outs []outcome
	for _, r := range rs {
		outs = append(outs, r.wait(t))
	}
	return outs
}

// allExit checks every agent exited with code.
func allExit(t *testing.T, outs []outcome, code int) {
	t.Helper()
	for i, o := range outs {
		if o.code != code {
			t.Errorf("agent %d: exit %d; want %d\n%s", i, o.code, code, o)
		}
	}
}

// TestElastic: elastic jobs (--nnodes=MIN:MAX) of agents on this host on
// a c10d store at localhost:PORT.
func TestElastic(t *testing.T) {
	t.Parallel()
	worker := script("compat_worker.py")

	// run_test.test_launch_elastic: one agent of --nnodes=1:2 runs alone
	// once last_call_timeout passes.
	t.Run("run_test.test_launch_elastic", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			dir := t.TempDir()
			outs := launchAgents(t, l, []job{{
				args: c10dArgs("1:2", strconv.Itoa(freePort(t)), runID(), "--nproc-per-node=2",
					"--rdzv-conf=join_timeout=5,last_call_timeout=1,timeout=5", "--monitor-interval=1", "--start-method=spawn"),
				script: []string{worker, "touch", dir},
			}})
			allExit(t, outs, 0)
			wantTouched(t, dir, 2, outs[0])
		})
	})

	// run_test.test_launch_elastic_worker_raise_exception: a worker that
	// raises fails the job (torchrun: ChildFailedError, exit 1; gorun:
	// the worker's exit code, 1 for an uncaught exception).
	t.Run("run_test.test_launch_elastic_worker_raise_exception", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			dir := t.TempDir()
			outs := launchAgents(t, l, []job{{
				args: c10dArgs("1:2", strconv.Itoa(freePort(t)), runID(), "--nproc-per-node=2",
					"--rdzv-conf=join_timeout=5,last_call_timeout=1,timeout=5", "--max-restarts=0"),
				script: []string{worker, "touch", dir, "--fail"},
			}})
			allExit(t, outs, l.failureCode(1))
			wantTouched(t, dir, 0, outs[0])
		})
	})

	// run_test.test_launch_elastic_multiple_agents: two agents of
	// --nnodes=1:2 make one job of 4 workers.
	t.Run("run_test.test_launch_elastic_multiple_agents", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			dir, ep, id := t.TempDir(), strconv.Itoa(freePort(t)), runID()
			j := job{args: c10dArgs("1:2", ep, id, "--nproc-per-node=2", "--rdzv-conf=timeout=5"), script: []string{worker, "touch", dir}}
			outs := launchAgents(t, l, []job{j, j})
			allExit(t, outs, 0)
			wantTouched(t, dir, 4, outs[0])
		})
	})
}

// agent is one agent of a heterogeneous job: its role and worker count.
type agent struct {
	role  string
	nproc int
}

// agentJobs are the launches of agents, each worker told its agent's
// index as the script's last argument.
func agentJobs(agents []agent, ep, id string, script func(i int) []string) []job {
	var jobs []job
	for i, a := range agents {
		args := c10dArgs(strconv.Itoa(len(agents)), ep, id, fmt.Sprintf("--nproc-per-node=%d", a.nproc), "--role="+a.role)
		jobs = append(jobs, job{args: args, script: script(i)})
	}
	return jobs
}

// checkRanks checks the workers' ranks (reports: one per worker,
// TAG its agent's index) as torchrun assigns them (docs/sources.md, torchrun: ranks):
// the agents' group ranks are 0..n-1; an agent's workers have global
// ranks from the sum of the worker counts of the agents of lower group
// rank, and role ranks from that sum over the agents of the same role;
// WORLD_SIZE is every worker, ROLE_WORLD_SIZE every worker of the role.
func checkRanks(t *testing.T, reports map[string]map[string]string, agents []agent) {
	t.Helper()
	total, roleSize := 0, map[string]int{}
	for _, a := range agents {
		total += a.nproc
		roleSize[a.role] += a.nproc
	}
	byAgent := make([][]map[string]string, len(agents))
	for _, report := range reports {
		i, err := strconv.Atoi(report["TAG"])
		if err != nil || i < 0 || i >= len(agents) {
			t.Fatalf("a worker of no agent: %v", report)
		}
		byAgent[i] = append(byAgent[i], report)
	}
	group := make([]int, len(agents))
	for i, a := range agents {
		var local []string
		for _, report := range byAgent[i] {
			local = append(local, report["LOCAL_RANK"])
			if report["GROUP_RANK"] != byAgent[i][0]["GROUP_RANK"] || report["ROLE_NAME"] != a.role || report["LOCAL_WORLD_SIZE"] != strconv.Itoa(a.nproc) {
				t.Errorf("agent %d (%s, %d workers): worker %v", i, a.role, a.nproc, report)
			}
		}
		slices.Sort(local)
		if !slices.Equal(local, rankNames(a.nproc)) {
			t.Errorf("agent %d (%s, %d workers): local ranks %v; want %v", i, a.role, a.nproc, local, rankNames(a.nproc))
			continue
		}
		group[i], _ = strconv.Atoi(byAgent[i][0]["GROUP_RANK"])
	}
	if t.Failed() {
		t.Fatalf("workers by agent: %v", byAgent)
	}
	if sorted := slices.Sorted(slices.Values(group)); !slices.Equal(sorted, func() []int {
		var want []int
		for i := range agents {
			want = append(want, i)
		}
		return want
	}()) {
		t.Fatalf("agents' group ranks %v; want 0..%d, one each", group, len(agents)-1)
	}
	for i, a := range agents {
		base, roleBase := 0, 0
		for j, b := range agents {
			if group[j] < group[i] {
				base += b.nproc
				if b.role == a.role {
					roleBase += b.nproc
				}
			}
		}
		for _, report := range byAgent[i] {
			lr, _ := strconv.Atoi(report["LOCAL_RANK"])
			want := map[string]string{
				"RANK": strconv.Itoa(base + lr), "ROLE_RANK": strconv.Itoa(roleBase + lr), "WORLD_SIZE": strconv.Itoa(total),
				"ROLE_WORLD_SIZE": strconv.Itoa(roleSize[a.role]), "GROUP_WORLD_SIZE": strconv.Itoa(len(agents)),
			}
			for k, v := range want {
				if report[k] != v {
					t.Errorf("agent %d (%s, %d workers, group rank %d), local rank %d: %s=%s; want %s (all: %v)", i, a.role, a.nproc, group[i], lr, k, report[k], v, report)
				}
			}
		}
	}
}

// TestHeterogeneous: agents of one job with different --nproc-per-node
// and --role get global and role ranks as torchrun assigns them.
func TestHeterogeneous(t *testing.T) {
	t.Parallel()

	// local_elastic_agent_test.test_run_distributed_sum_heterogeneous_c10d:
	// 3 agents of 1, 2 and 3 workers; a gloo all-reduce of the ranks sums
	// 0 + 1 + ... + 5 = 15.
	t.Run("local_elastic_agent_test.test_run_distributed_sum_heterogeneous_c10d", func(t *testing.T) {
		t.Parallel()
		needTorch(t)
		both(t, func(t *testing.T, l launcher) {
			dir := t.TempDir()
			agents := []agent{{"sum", 1}, {"sum", 2}, {"sum", 3}}
			outs := launchAgents(t, l, agentJobs(agents, strconv.Itoa(freePort(t)), runID(), func(i int) []string {
				return []string{script("distsum.py"), dir, strconv.Itoa(i)}
			}))
			allExit(t, outs, 0)
			reports := dumps(t, dir)
			for name, report := range reports {
				if report["SUM"] != "15" {
					t.Errorf("%s: sum %s; want 15", name, report["SUM"])
				}
			}
			checkRanks(t, reports, agents)
		})
	})

	// local_elastic_agent_test.test_correct_rank_assignment_heterogeneous:
	// agents of roles master, trainer and ps with different worker counts
	// (upstream runs 7 agents on etcd; 4 here, on c10d).
	t.Run("local_elastic_agent_test.test_correct_rank_assignment_heterogeneous", func(t *testing.T) {
		t.Parallel()
		both(t, func(t *testing.T, l launcher) {
			dir := t.TempDir()
			agents := []agent{{"master", 1}, {"trainer", 2}, {"trainer", 1}, {"ps", 2}}
			outs := launchAgents(t, l, agentJobs(agents, strconv.Itoa(freePort(t)), runID(), func(i int) []string {
				return []string{script("compat_worker.py"), "env", dir, strconv.Itoa(i)}
			}))
			allExit(t, outs, 0)
			checkRanks(t, dumps(t, dir), agents)
		})
	})
}
