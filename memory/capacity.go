package memory

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun-dev/gorun/internal/setting"
)

// MiB and GiB in bytes.
const (
	MiB = 1 << 20
	GiB = 1 << 30
)

// devices are the --gpu presets: total memory as nvidia-smi (npu-smi for
// Ascend) reports it.
var devices = map[string]float64{
	"h100-80gb":  81559 * MiB,
	"h200-141gb": 143771 * MiB,
	"a100-80gb":  81920 * MiB,
	"a100-40gb":  40960 * MiB,
	"910b-64gb":  65536 * MiB,
}

// Devices lists the device presets.
func Devices() []string {
	names := make([]string, 0, len(devices))
	for n := range devices {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// DeviceMemory returns a preset's memory in bytes. An unknown name is
// bad input about the setting GPU (topology.Config's), which GPUMemory
// may replace.
func DeviceMemory(name string) (float64, error) {
	if b, ok := devices[strings.ToLower(name)]; ok {
		return b, nil
	}
	return 0, setting.Errorf("%s=%q: want one of %s, or give %s", setting.Name("GPU"), name, strings.Join(Devices(), ", "), setting.Name("GPUMemory"))
}

// ParseBytes reads a memory size: a number with a unit, binary (KiB, MiB,
// GiB, TiB) or decimal (KB, MB, GB, TB), or B.
func ParseBytes(s string) (float64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("memory size %q: want a number and a unit, such as 80GiB or 141GB", s)
	}
	n, err := strconv.ParseFloat(t[:i], 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("memory size %q: want a positive number and a unit, such as 80GiB", s)
	}
	units := map[string]float64{"b": 1, "kib": 1 << 10, "mib": MiB, "gib": GiB, "tib": 1 << 40,
		"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}
	u, ok := units[strings.ToLower(strings.TrimSpace(t[i:]))]
	if !ok {
		return 0, fmt.Errorf("memory size %q: unit %q: want B, KiB, MiB, GiB, TiB, KB, MB, GB or TB", s, t[i:])
	}
	return n * u, nil
}

// NotCounted is what both estimates leave out (docs/sources.md, memory tuning): measure the
// final configuration on the device.
var notCounted = []string{
	"allocator fragmentation (most out-of-memory errors come from it: expandable segments fix it)",
	"CUDA/NCCL workspaces and communication buffers",
	"CUDA graph buffers",
	"MoE token imbalance and dispatcher workspaces",
}

// NotCounted lists what the estimates leave out.
func NotCounted() []string { return slices.Clone(notCounted) }
