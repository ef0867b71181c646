package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/proc"
)

// NUMA binding modes of torchrun 2.x's --numa-binding: the CPUs a worker
// may run on, chosen from those near the GPU whose index is its local
// rank.
const (
	// NUMANode: every CPU of the GPU's NUMA node.
	NUMANode = "node"
	// NUMASocket: every CPU of the NUMA nodes of the GPU's socket.
	NUMASocket = "socket"
	// NUMAExclusive: an equal share of the physical cores of the GPU's
	// NUMA node, one share per GPU on that node, with all their threads.
	NUMAExclusive = "exclusive"
	// NUMACoreComplex: the CPUs that share one last-level cache (a core
	// complex) on the GPU's NUMA node, a different one per GPU there
	// where there are enough.
	NUMACoreComplex = "core-complex"
)

// NUMAProbe finds which CPUs each worker is bound to. Its fields are the
// places it looks, so that tests can point them at fixtures.
type NUMAProbe struct {
	// NvidiaSMI is the nvidia-smi command, which gives each GPU's PCI
	// address.
	NvidiaSMI string
	// SysDir is sysfs ("/sys"): NUMA nodes, CPU topology and caches, and
	// each PCI device's NUMA node.
	SysDir string
	// LookupEnv reads CUDA_VISIBLE_DEVICES.
	LookupEnv func(string) (string, bool)
	// Allowed lists the CPUs this process may run on (a worker is bound
	// to some of these only).
	Allowed func() ([]int, error)
}

// NewNUMAProbe returns a probe of this machine.
func NewNUMAProbe() NUMAProbe {
	return NUMAProbe{NvidiaSMI: "nvidia-smi", SysDir: "/sys", LookupEnv: os.LookupEnv, Allowed: proc.Affinity}
}

// Bind returns, for each local rank 0..nproc-1, the CPUs its worker is
// bound to under mode, as torchrun 2.x chooses them for the GPU whose
// index (among the visible ones) is the local rank, and a line per rank
// that says so. An error names what is missing: no GPU, fewer GPUs than
// workers, a topology sysfs does not show; it calls mode the setting
// NUMABinding (internal/setting).
func (p NUMAProbe) Bind(ctx context.Context, mode string, nproc int) (cpus [][]int, notes []string, err error) {
	switch mode {
	case NUMANode, NUMASocket, NUMAExclusive, NUMACoreComplex:
	default:
		return nil, nil, setting.Errorf("%s=%q: want node, socket, exclusive or core-complex", setting.Name("NUMABinding"), mode)
	}
	gpus, err := p.visibleGPUs(ctx)
	if err != nil {
		return nil, nil, setting.Errorf("%s=%s: %w", setting.Name("NUMABinding"), mode, err)
	}
	if len(gpus) < nproc {
		return nil, nil, setting.Errorf("%s=%s binds each worker near the GPU of its local rank: %d workers, %d GPUs visible", setting.Name("NUMABinding"), mode, nproc, len(gpus))
	}
	allowed, err := p.Allowed()
	if err != nil {
		return nil, nil, setting.Errorf("%s=%s: this process's CPUs: %w", setting.Name("NUMABinding"), mode, err)
	}
	t := cpuTopology{sys: p.SysDir, allowed: allowed}
	for i := range gpus {
		if gpus[i].node, err = t.deviceNode(gpus[i].pci); err != nil {
			return nil, nil, setting.Errorf("%s=%s: GPU %d: %w", setting.Name("NUMABinding"), mode, i, err)
		}
	}
	for lr := range nproc {
		set, err := t.cpusFor(mode, gpus, lr)
		if err == nil && len(set) == 0 {
			err = fmt.Errorf("none of this process's CPUs %s is near it", rangeList(allowed))
		}
		if err != nil {
			return nil, nil, setting.Errorf("%s=%s: local rank %d (GPU %s on NUMA node %d): %w", setting.Name("NUMABinding"), mode, lr, gpus[lr].pci, gpus[lr].node, err)
		}
		cpus = append(cpus, set)
		notes = append(notes, fmt.Sprintf("--numa-binding=%s: local rank %d runs on CPUs %s (GPU %s, NUMA node %d)", mode, lr, rangeList(set), gpus[lr].pci, gpus[lr].node))
	}
	return cpus, notes, nil
}

// gpu is one visible GPU: its sysfs PCI address and NUMA node.
type gpu struct {
	pci  string
	node int
}

// visibleGPUs lists the GPUs the workers see, in CUDA's order: nvidia-smi's
// (PCI bus order), narrowed and reordered by CUDA_VISIBLE_DEVICES
// (indices or UUIDs).
func (p NUMAProbe) visibleGPUs(ctx context.Context) ([]gpu, error) {
	out, err := exec.CommandContext(ctx, p.NvidiaSMI, "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader").Output()
	if err != nil {
		return nil, fmt.Errorf("no NVIDIA GPU's PCI address (%s: %v): binding needs the GPUs' NUMA nodes", p.NvidiaSMI, err)
	}
	type smiGPU struct{ index, uuid, pci string }
	var all []smiGPU
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, ",")
		if len(f) != 3 {
			continue
		}
		pci, err := sysfsPCI(strings.TrimSpace(f[2]))
		if err != nil {
			return nil, err
		}
		all = append(all, smiGPU{strings.TrimSpace(f[0]), strings.TrimSpace(f[1]), pci})
	}
	if len(all) == 0 {
		return nil, errors.New("nvidia-smi lists no GPU: binding needs the GPUs' NUMA nodes")
	}
	list, set := p.LookupEnv("CUDA_VISIBLE_DEVICES")
	if !set {
		gpus := make([]gpu, len(all))
		for i, g := range all {
			gpus[i] = gpu{pci: g.pci}
		}
		return gpus, nil
	}
	var gpus []gpu
	for _, entry := range strings.Split(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		i := slices.IndexFunc(all, func(g smiGPU) bool {
			return g.index == entry || (strings.HasPrefix(entry, "GPU-") && strings.HasPrefix(g.uuid, entry))
		})
		if i < 0 {
			// CUDA stops at the first entry it cannot place.
			break
		}
		gpus = append(gpus, gpu{pci: all[i].pci})
	}
	return gpus, nil
}

// sysfsPCI turns nvidia-smi's bus id ("00000000:1B:00.0") into sysfs's
// device name ("0000:1b:00.0").
func sysfsPCI(busID string) (string, error) {
	domain, rest, ok := strings.Cut(busID, ":")
	if !ok || len(domain) < 4 {
		return "", fmt.Errorf("nvidia-smi's PCI bus id %q: want DOMAIN:BUS:DEVICE.FUNCTION", busID)
	}
	return strings.ToLower(domain[len(domain)-4:] + ":" + rest), nil
}

// cpuTopology reads the machine's CPUs and NUMA nodes from sysfs.
type cpuTopology struct {
	sys     string
	allowed []int
}

func (t cpuTopology) read(rel string) (string, error) {
	data, err := os.ReadFile(filepath.Join(t.sys, rel))
	return strings.TrimSpace(string(data)), err
}

// deviceNode is the NUMA node of a PCI device; a machine of one node
// says -1, which is node 0.
func (t cpuTopology) deviceNode(pci string) (int, error) {
	s, err := t.read(filepath.Join("bus", "pci", "devices", pci, "numa_node"))
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("the NUMA node of %s: %q", pci, s)
	}
	return max(n, 0), nil
}

// nodeCPUs are the CPUs of NUMA node n this process may use.
func (t cpuTopology) nodeCPUs(n int) ([]int, error) {
	s, err := t.read(filepath.Join("devices", "system", "node", "node"+strconv.Itoa(n), "cpulist"))
	if err != nil {
		return nil, fmt.Errorf("the CPUs of NUMA node %d: %w", n, err)
	}
	all, err := parseRanges(s)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, c := range all {
		if slices.Contains(t.allowed, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// cpuFile reads a CPU's topology file as a list of CPUs.
func (t cpuTopology) cpuList(cpu int, rel string) ([]int, error) {
	s, err := t.read(filepath.Join("devices", "system", "cpu", "cpu"+strconv.Itoa(cpu), rel))
	if err != nil {
		return nil, err
	}
	return parseRanges(s)
}

// cpusFor chooses local rank lr's CPUs under mode.
func (t cpuTopology) cpusFor(mode string, gpus []gpu, lr int) ([]int, error) {
	node := gpus[lr].node
	switch mode {
	case NUMANode:
		return t.nodeCPUs(node)
	case NUMASocket:
		return t.socketCPUs(node)
	}
	// exclusive and core-complex share the node among its GPUs.
	var peers []int // the indices of the GPUs on lr's node, lr among them
	for i, g := range gpus {
		if g.node == node {
			peers = append(peers, i)
		}
	}
	nth := slices.Index(peers, lr)
	cpus, err := t.nodeCPUs(node)
	if err != nil {
		return nil, err
	}
	if mode == NUMAExclusive {
		cores, err := t.groupBy(cpus, "topology/thread_siblings_list")
		if err != nil {
			return nil, err
		}
		per, extra := len(cores)/len(peers), len(cores)%len(peers)
		if per < 1 {
			return nil, fmt.Errorf("%d physical cores for %d GPUs on the node", len(cores), len(peers))
		}
		start := nth*per + min(nth, extra)
		end := start + per
		if nth < extra {
			end++
		}
		var out []int
		for _, core := range cores[start:end] {
			out = append(out, core...)
		}
		sort.Ints(out)
		return out, nil
	}
	complexes, err := t.groupByLastCache(cpus)
	if err != nil {
		return nil, err
	}
	// The complexes with the most CPUs first, then by their first CPU.
	sort.SliceStable(complexes, func(i, j int) bool { return len(complexes[i]) > len(complexes[j]) })
	return complexes[nth%len(complexes)], nil
}

// socketCPUs are the CPUs of every NUMA node in the socket of node.
func (t cpuTopology) socketCPUs(node int) ([]int, error) {
	socketOf := func(n int) (string, error) {
		cpus, err := t.nodeCPUs(n)
		if err != nil || len(cpus) == 0 {
			return "", fmt.Errorf("no CPU of NUMA node %d to find its socket: %v", n, err)
		}
		return t.read(filepath.Join("devices", "system", "cpu", "cpu"+strconv.Itoa(cpus[0]), "topology", "physical_package_id"))
	}
	want, err := socketOf(node)
	if err != nil {
		return nil, err
	}
	possible, err := t.read(filepath.Join("devices", "system", "node", "possible"))
	if err != nil {
		return nil, err
	}
	nodes, err := parseRanges(possible)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, n := range nodes {
		if s, err := socketOf(n); err == nil && s == want {
			cpus, _ := t.nodeCPUs(n)
			out = append(out, cpus...)
		}
	}
	sort.Ints(out)
	return out, nil
}

// groupBy groups cpus by the first CPU of their topology list rel (a
// physical core: its thread siblings), in that first CPU's order.
func (t cpuTopology) groupBy(cpus []int, rel string) ([][]int, error) {
	groups := map[int][]int{}
	for _, c := range cpus {
		list, err := t.cpuList(c, rel)
		if err != nil || len(list) == 0 {
			return nil, fmt.Errorf("CPU %d's %s: %v", c, rel, err)
		}
		groups[slices.Min(list)] = append(groups[slices.Min(list)], c)
	}
	return sortedGroups(groups), nil
}

// groupByLastCache groups cpus by the last-level data or unified cache
// they share.
func (t cpuTopology) groupByLastCache(cpus []int) ([][]int, error) {
	groups := map[int][]int{}
	for _, c := range cpus {
		dir := filepath.Join("devices", "system", "cpu", "cpu"+strconv.Itoa(c), "cache")
		entries, err := os.ReadDir(filepath.Join(t.sys, dir))
		if err != nil {
			return nil, fmt.Errorf("CPU %d's caches: %w", c, err)
		}
		level, shared := -1, []int(nil)
		for _, e := range entries {
			idx, ok := strings.CutPrefix(e.Name(), "index")
			if n, err := strconv.Atoi(idx); !ok || err != nil || n < 0 {
				continue
			}
			typ, _ := t.read(filepath.Join(dir, e.Name(), "type"))
			if typ != "Unified" && typ != "Data" {
				continue
			}
			ls, _ := t.read(filepath.Join(dir, e.Name(), "level"))
			l, err := strconv.Atoi(ls)
			if err != nil || l <= level {
				continue
			}
			list, _ := t.read(filepath.Join(dir, e.Name(), "shared_cpu_list"))
			if shared, err = parseRanges(list); err != nil {
				return nil, err
			}
			level = l
		}
		if len(shared) == 0 {
			return nil, fmt.Errorf("CPU %d shows no data cache in %s", c, dir)
		}
		groups[slices.Min(shared)] = append(groups[slices.Min(shared)], c)
	}
	return sortedGroups(groups), nil
}

func sortedGroups(groups map[int][]int) [][]int {
	keys := make([]int, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	out := make([][]int, len(keys))
	for i, k := range keys {
		out[i] = groups[k]
		sort.Ints(out[i])
	}
	return out
}

// parseRanges reads sysfs's CPU list syntax, "0-3,8,10-11".
func parseRanges(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || b < a {
			return nil, fmt.Errorf("CPU list %q: want ranges such as 0-3,8", s)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

// rangeList writes CPUs in sysfs's syntax, "0-3,8".
func rangeList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i])+"-"+strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
