package launcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// numaFixture lays out a sysfs of 2 sockets, 4 NUMA nodes (0 and 1 on
// socket 0), each of 2 physical cores of 2 threads (node n: CPUs 4n to
// 4n+3), each core with a last-level cache of its own; and an
// nvidia-smi that lists 4 GPUs: 0 and 1 on node 0, 2 on node 1, 3 on
// node 2.
func numaFixture(t *testing.T) (sys, smi string) {
	t.Helper()
	root := t.TempDir()
	write := func(rel, text string) {
		p := filepath.Join(root, "sys", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("devices/system/node/possible", "0-3")
	for n := range 4 {
		write(fmt.Sprintf("devices/system/node/node%d/cpulist", n), fmt.Sprintf("%d-%d", 4*n, 4*n+3))
		for c := 4 * n; c < 4*n+4; c++ {
			core := fmt.Sprintf("%d-%d", c&^1, c|1)
			cpu := fmt.Sprintf("devices/system/cpu/cpu%d/", c)
			write(cpu+"topology/thread_siblings_list", core)
			write(cpu+"topology/physical_package_id", fmt.Sprint(n/2))
			write(cpu+"cache/index0/type", "Instruction")
			write(cpu+"cache/index0/level", "1")
			write(cpu+"cache/index0/shared_cpu_list", fmt.Sprint(c))
			write(cpu+"cache/index1/type", "Data")
			write(cpu+"cache/index1/level", "1")
			write(cpu+"cache/index1/shared_cpu_list", core)
			write(cpu+"cache/index3/type", "Unified")
			write(cpu+"cache/index3/level", "3")
			write(cpu+"cache/index3/shared_cpu_list", core)
		}
	}
	var lines []string
	for i, node := range []int{0, 0, 1, 2} {
		addr := fmt.Sprintf("0000:%02x:00.0", 0x1b+i)
		write("bus/pci/devices/"+addr+"/numa_node", fmt.Sprint(node))
		lines = append(lines, fmt.Sprintf("%d, GPU-%d111-2222, 0000%s", i, i, strings.ToUpper(addr)))
	}
	smi = filepath.Join(root, "nvidia-smi")
	script := "#!/bin/sh\ncat <<'EOF'\n" + strings.Join(lines, "\n") + "\nEOF\n"
	if err := os.WriteFile(smi, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "sys"), smi
}

func TestNUMABind(t *testing.T) {
	sys, smi := numaFixture(t)
	all := func() ([]int, error) { r, _ := parseRanges("0-15"); return r, nil }
	tests := []struct {
		name    string
		mode    string
		nproc   int
		visible string // CUDA_VISIBLE_DEVICES; "" unset
		allowed string // gorun's own CPUs; "" all
		want    []string
		wantErr string
	}{
		{name: "node", mode: NUMANode, nproc: 4, want: []string{"0-3", "0-3", "4-7", "8-11"}},
		{name: "socket", mode: NUMASocket, nproc: 4, want: []string{"0-7", "0-7", "0-7", "8-15"}},
		{name: "exclusive: a node's cores shared by its GPUs", mode: NUMAExclusive, nproc: 4, want: []string{"0-1", "2-3", "4-7", "8-11"}},
		{name: "core-complex", mode: NUMACoreComplex, nproc: 4, want: []string{"0-1", "2-3", "4-5", "8-9"}},
		{name: "only the CPUs gorun may use", mode: NUMAExclusive, nproc: 2, allowed: "0-2", want: []string{"0-1", "2"}},
		{name: "CUDA_VISIBLE_DEVICES by index", mode: NUMANode, nproc: 2, visible: "3,0", want: []string{"8-11", "0-3"}},
		{name: "CUDA_VISIBLE_DEVICES by UUID", mode: NUMANode, nproc: 1, visible: "GPU-2111", want: []string{"4-7"}},
		{name: "more workers than GPUs", mode: NUMANode, nproc: 5,
			wantErr: "NUMABinding=node binds each worker near the GPU of its local rank: 5 workers, 4 GPUs visible"},
		{name: "CUDA stops at an entry it cannot place", mode: NUMANode, nproc: 2, visible: "1,7,2",
			wantErr: "2 workers, 1 GPUs visible"},
		{name: "none of gorun's CPUs near the GPU", mode: NUMANode, nproc: 3, allowed: "0-3",
			wantErr: "local rank 2 (GPU 0000:1d:00.0 on NUMA node 1): none of this process's CPUs 0-3 is near it"},
		{name: "unknown mode", mode: "cores", nproc: 1, wantErr: `NUMABinding="cores": want node, socket, exclusive or core-complex`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NUMAProbe{NvidiaSMI: smi, SysDir: sys, Allowed: all,
				LookupEnv: func(k string) (string, bool) {
					if k == "CUDA_VISIBLE_DEVICES" && tt.visible != "" {
						return tt.visible, true
					}
					return "", false
				}}
			if tt.allowed != "" {
				p.Allowed = func() ([]int, error) { return parseRanges(tt.allowed) }
			}
			cpus, notes, err := p.Bind(context.Background(), tt.mode, tt.nproc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range cpus {
				got = append(got, rangeList(c))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("CPUs by local rank %q; want %q", got, tt.want)
			}
			if len(notes) != tt.nproc || !strings.Contains(notes[0], "local rank 0 runs on CPUs "+tt.want[0]) {
				t.Errorf("notes %q", notes)
			}
		})
	}
	p := NUMAProbe{NvidiaSMI: filepath.Join(t.TempDir(), "absent"), SysDir: sys, Allowed: all, LookupEnv: os.LookupEnv}
	if _, _, err := p.Bind(context.Background(), NUMANode, 1); err == nil || !strings.Contains(err.Error(), "no NVIDIA GPU's PCI address") {
		t.Errorf("without nvidia-smi: %v", err)
	}
}

func TestCPURanges(t *testing.T) {
	for _, s := range []string{"0-3,8,10-11", "5", ""} {
		c, err := parseRanges(s)
		if err != nil || rangeList(c) != s {
			t.Errorf("%q -> %v %v -> %q", s, c, err, rangeList(c))
		}
	}
	for _, bad := range []string{"3-1", "a", "1-"} {
		if _, err := parseRanges(bad); err == nil {
			t.Errorf("parseRanges(%q) took it", bad)
		}
	}
}
