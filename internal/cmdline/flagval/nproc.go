package flagval

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// ErrNoDevices is returned when --nproc-per-node=gpu finds no GPU.
var ErrNoDevices = errors.New("no accelerator found")

// DeviceProbe counts the node's devices. Its fields are the places it
// looks, so that tests can point them at fixtures.
type DeviceProbe struct {
	// NvidiaSMI is the nvidia-smi command; "" skips it.
	NvidiaSMI string
	// DevDir is where device nodes live ("/dev").
	DevDir string
	// LookupEnv reads CUDA_VISIBLE_DEVICES and ASCEND_RT_VISIBLE_DEVICES.
	LookupEnv func(string) (string, bool)
	// NumCPU counts usable CPUs.
	NumCPU func() int
}

// NewDeviceProbe returns a probe of this machine.
func NewDeviceProbe() DeviceProbe {
	return DeviceProbe{NvidiaSMI: "nvidia-smi", DevDir: "/dev", LookupEnv: os.LookupEnv, NumCPU: runtime.NumCPU}
}

// numbered reports whether name is prefix followed by decimal digits only,
// as in nvidia0 or davinci7 (and not nvidiactl or davinci_manager).
func numbered(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	return ok && digits(rest)
}

// digits reports whether s is a non-empty run of decimal digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// countGPULines counts the "GPU <n>: ..." lines of `nvidia-smi -L`.
func countGPULines(out string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if idx, ok := strings.CutPrefix(line, "GPU "); ok {
			if i := strings.IndexByte(idx, ':'); i > 0 && digits(idx[:i]) {
				n++
			}
		}
	}
	return n
}

// NvidiaGPUs counts NVIDIA GPUs: the lines of `nvidia-smi -L` when it runs,
// else the /dev/nvidiaN device nodes; then limited by CUDA_VISIBLE_DEVICES.
func (p DeviceProbe) NvidiaGPUs(ctx context.Context) int {
	n := -1
	if p.NvidiaSMI != "" {
		if out, err := exec.CommandContext(ctx, p.NvidiaSMI, "-L").Output(); err == nil {
			n = countGPULines(string(out))
		}
	}
	if n < 0 {
		n = p.countDevices("nvidia")
	}
	return p.visible(n, "CUDA_VISIBLE_DEVICES")
}

// AscendNPUs counts Ascend NPUs from /dev/davinciN, limited by
// ASCEND_RT_VISIBLE_DEVICES.
func (p DeviceProbe) AscendNPUs() int {
	return p.visible(p.countDevices("davinci"), "ASCEND_RT_VISIBLE_DEVICES")
}

// countDevices counts the device nodes named prefix<N> in DevDir.
func (p DeviceProbe) countDevices(prefix string) int {
	entries, err := os.ReadDir(p.DevDir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if numbered(e.Name(), prefix) {
			n++
		}
	}
	return n
}

// visible limits n devices by the *_VISIBLE_DEVICES variable named by
// envVar: unset means all; set, the number of listed entries up to the
// first empty or invalid one (CUDA ignores the rest of the list there), but
// never more than n. Set and empty means none.
func (p DeviceProbe) visible(n int, envVar string) int {
	list, set := p.LookupEnv(envVar)
	if !set {
		return n
	}
	count := 0
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			break
		}
		if _, err := strconv.Atoi(f); err != nil && !strings.HasPrefix(f, "GPU-") && !strings.HasPrefix(f, "MIG-") {
			break
		}
		count++
	}
	return min(count, n)
}

// ResolveNproc turns a --nproc-per-node value into a number of workers:
// an integer; "cpu" (usable CPUs); "gpu" (NVIDIA GPUs, an error if none);
// "npu" (Ascend NPUs, an error if none); "auto" (GPUs, else NPUs, else
// CPUs). The second result names what was counted, for the log.
func (p DeviceProbe) ResolveNproc(ctx context.Context, value string) (int, string, error) {
	v := strings.TrimSpace(value)
	if n, err := strconv.Atoi(v); err == nil {
		if n < 1 {
			return 0, "", fmt.Errorf("--nproc-per-node=%s: want at least 1 worker", value)
		}
		return n, "", nil
	}
	switch v {
	case "cpu":
		return p.NumCPU(), "CPUs", nil
	case "gpu":
		if n := p.NvidiaGPUs(ctx); n > 0 {
			return n, "NVIDIA GPUs", nil
		}
		return 0, "", fmt.Errorf("--nproc-per-node=gpu: %w (no GPU in `nvidia-smi -L` or %s/nvidia*, or CUDA_VISIBLE_DEVICES hides them)", ErrNoDevices, p.DevDir)
	case "npu":
		if n := p.AscendNPUs(); n > 0 {
			return n, "Ascend NPUs", nil
		}
		return 0, "", fmt.Errorf("--nproc-per-node=npu: %w (no %s/davinci*, or ASCEND_RT_VISIBLE_DEVICES hides them)", ErrNoDevices, p.DevDir)
	case "auto":
		if n := p.NvidiaGPUs(ctx); n > 0 {
			return n, "NVIDIA GPUs", nil
		}
		if n := p.AscendNPUs(); n > 0 {
			return n, "Ascend NPUs", nil
		}
		return p.NumCPU(), "CPUs (no accelerator found)", nil
	}
	return 0, "", fmt.Errorf("--nproc-per-node=%q: want an integer, cpu, gpu, npu or auto", value)
}
