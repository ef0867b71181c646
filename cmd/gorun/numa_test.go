package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestNUMABinding runs workers with --numa-binding on this machine's own
// topology (sysfs), with an nvidia-smi stand-in that names two of its
// real PCI devices as GPUs, and reads each worker's CPU affinity from
// /proc/self/status: node gives each the whole NUMA node's CPUs gorun
// may use; exclusive splits the node's physical cores between the two
// GPUs. Where the node has fewer than 2 physical cores, exclusive is
// refused, saying so.
func TestNUMABinding(t *testing.T) {
	t.Parallel()
	devices, _ := filepath.Glob("/sys/bus/pci/devices/*/numa_node")
	var node0 []string // PCI devices on NUMA node 0 (or of no node: -1)
	for _, d := range devices {
		if b, err := os.ReadFile(d); err == nil && (strings.TrimSpace(string(b)) == "0" || strings.TrimSpace(string(b)) == "-1") {
			node0 = append(node0, filepath.Base(filepath.Dir(d)))
		}
	}
	if len(node0) < 2 {
		t.Skipf("SKIPPED: fewer than 2 PCI devices on NUMA node 0 to stand for GPUs (%v)", devices)
	}
	bin := t.TempDir()
	smi := "#!/bin/sh\n"
	for i, addr := range node0[:2] {
		smi += fmt.Sprintf("echo '%d, GPU-%d, 0000%s'\n", i, i, strings.ToUpper(addr))
	}
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(smi), 0o755); err != nil {
		t.Fatal(err)
	}
	// What the node offers: its CPUs that gorun may use (this test's).
	nodeList, err := os.ReadFile("/sys/devices/system/node/node0/cpulist")
	if err != nil {
		t.Skipf("SKIPPED: no NUMA node 0 in sysfs: %v", err)
	}
	status, _ := os.ReadFile("/proc/self/status")
	allowed := cpuSet(t, field(string(status), "Cpus_allowed_list"))
	var node []int
	for _, c := range cpuSet(t, strings.TrimSpace(string(nodeList))) {
		if slices.Contains(allowed, c) {
			node = append(node, c)
		}
	}
	cores := map[string]bool{}
	for _, c := range node {
		b, _ := os.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c))
		cores[strings.TrimSpace(string(b))] = true
	}
	worker := writeScript(t, `grep Cpus_allowed_list /proc/self/status > "$OUT/$LOCAL_RANK"`+"\n")
	for _, mode := range []string{"node", "exclusive"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			out := t.TempDir()
			var env []string // CUDA_VISIBLE_DEVICES unset: every "GPU" visible
			for _, kv := range testEnv("PATH="+bin+":"+os.Getenv("PATH"), "OUT="+out) {
				if !strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") {
					env = append(env, kv)
				}
			}
			r := runGorun(t, env,
				"--nproc-per-node=2", "--numa-binding="+mode, "--no-python", worker)
			if mode == "exclusive" && len(cores) < 2 {
				if r.code != 2 || !strings.Contains(r.stderr, "physical cores for 2 GPUs") {
					t.Errorf("exit %d; want 2 saying the node has too few cores\n%s", r.code, r.stderr)
				}
				return
			}
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			var got [2][]int
			for lr := range 2 {
				b, err := os.ReadFile(filepath.Join(out, strconv.Itoa(lr)))
				if err != nil {
					t.Fatal(err)
				}
				got[lr] = cpuSet(t, field(string(b), "Cpus_allowed_list"))
				if !strings.Contains(r.stderr, fmt.Sprintf("local rank %d runs on CPUs", lr)) {
					t.Errorf("no line for local rank %d:\n%s", lr, r.stderr)
				}
			}
			switch mode {
			case "node":
				for lr := range 2 {
					if !slices.Equal(got[lr], node) {
						t.Errorf("local rank %d runs on %v; want NUMA node 0's %v", lr, got[lr], node)
					}
				}
			case "exclusive":
				union := slices.Sorted(slices.Values(append(slices.Clone(got[0]), got[1]...)))
				if len(got[0]) == 0 || len(got[1]) == 0 || !slices.Equal(union, node) || slices.ContainsFunc(got[0], func(c int) bool { return slices.Contains(got[1], c) }) {
					t.Errorf("local ranks run on %v and %v; want two disjoint shares of %v", got[0], got[1], node)
				}
			}
		})
	}
	t.Run("no GPU", func(t *testing.T) {
		t.Parallel()
		r := runGorun(t, testEnv("PATH=/nonexistent"), "--nproc-per-node=1", "--numa-binding=socket", "--no-python", "/bin/true")
		if r.code != 2 || !strings.Contains(r.stderr, "--numa-binding=socket: no NVIDIA GPU's PCI address") {
			t.Errorf("exit %d; want 2 saying binding needs the GPUs\n%s", r.code, r.stderr)
		}
	})
}

// field is the value of a "Name:\tvalue" line of a /proc status file.
func field(status, name string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// cpuSet reads a CPU list such as "0-3,8".
func cpuSet(t *testing.T, s string) []int {
	t.Helper()
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			t.Fatalf("CPU list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				t.Fatalf("CPU list %q", s)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out
}
