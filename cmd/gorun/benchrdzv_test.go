package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestBenchRendezvousAcrossProcesses: `gorun bench rendezvous
// --processes 2` runs the agents in two processes of their own beside the
// store's, every agent gets a distinct rank (checked by the benchmark),
// the store's CPU and memory are measured, and no agent process is left.
func TestBenchRendezvousAcrossProcesses(t *testing.T) {
	t.Parallel()
	r := runGorun(t, testEnv(), "bench", "rendezvous", "--agents", "24", "--processes", "2", "--format", "json")
	var res struct {
		Agents, Processes  int
		Seconds            float64
		FloorSeconds       float64 `json:"floor_seconds"`
		StoreCPU           float64 `json:"store_cpu_seconds"`
		FloorStoreCPU      float64 `json:"floor_store_cpu_seconds"`
		StoreBytesPerAgent int64   `json:"store_bytes_per_agent"`
		Running            float64 `json:"running_store_cores"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &res) != nil {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if res.Agents != 24 || res.Processes != 3 || res.Seconds <= 0 || res.FloorSeconds <= 0 || res.StoreCPU <= 0 || res.FloorStoreCPU <= 0 || res.Running <= 0 {
		t.Errorf("result %+v: want 24 agents in 3 processes, both clocks, the store's CPU in each and while the job runs", res)
	}
	if left := agentProcesses(t); len(left) > 0 {
		t.Errorf("agent processes left behind: %v", left)
	}
}

// TestBenchRendezvousRealJob: `gorun bench rendezvous --real-job` runs a
// job of real gorun agents through its first round, a node's loss and a
// node's join, with the in-process measure of the same count beside it.
func TestBenchRendezvousRealJob(t *testing.T) {
	t.Parallel()
	r := runGorun(t, testEnv(), "bench", "rendezvous", "--agents", "4", "--real-job", "--format", "json")
	var res struct {
		Nodes       int
		Form        float64              `json:"form_seconds"`
		FormFirst   float64              `json:"form_first_seconds"`
		LossSeconds float64              `json:"loss_seconds"`
		JoinSeconds float64              `json:"join_seconds"`
		AgentBytes  int64                `json:"agent_bytes"`
		Twin        struct{ Agents int } `json:"in_process"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &res) != nil {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if res.Nodes != 4 || res.Form <= 0 || res.LossSeconds <= 0 || res.JoinSeconds <= 0 || res.AgentBytes <= 0 || res.Twin.Agents != 4 ||
		res.FormFirst <= 0 || res.FormFirst > res.Form {
		t.Errorf("result %+v: want 4 nodes, each step timed (the first agent's workers no later than the last's), the agents' memory, and the in-process twin of 4", res)
	}
}

// TestBenchRealJobEndsWithItsAgents: the real job's agents, each in a
// process group of its own, end with the benchmark when it is stopped
// (SIGINT, as Ctrl-C; SIGTERM, as timeout(1)): they were left running,
// with their workers (helper-25's probe). Not parallel: it counts every
// real-job agent of these tests' binary.
func TestBenchRealJobEndsWithItsAgents(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(signalName(sig), func(t *testing.T) {
			cmd, _, stderr := startGorun(t, testEnv(), "bench", "rendezvous", "--agents", "6", "--real-job", "--format", "json")
			waitFor(t, "3 agents of the real job to start\n"+stderr.String(), func() bool { return len(benchProcesses("rdzv-id=bench-agents")) >= 3 })
			_ = cmd.Process.Signal(sig)
			_ = cmd.Wait()
			if left := benchProcesses("rdzv-id=bench-agents"); len(left) > 0 {
				t.Errorf("agents left after the benchmark ended on SIG%s: %v", signalName(sig), left)
			}
		})
	}
}

// agentProcesses lists the benchmark's agent processes still running.
func agentProcesses(t *testing.T) []string {
	t.Helper()
	return benchProcesses("--agents-at")
}

// benchProcesses lists the running processes of these tests' binaries
// whose command line has marker.
func benchProcesses(marker string) []string {
	procs, _ := os.ReadDir("/proc")
	var found []string
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), marker) && strings.Contains(string(b), filepath.Dir(gorunBin)) {
			found = append(found, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}
