package bench

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// Machine describes where a benchmark ran.
type Machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Memory string `json:"memory"`
	OS     string `json:"os"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	Python string `json:"python"`
}

// String renders the machine in one line.
func (m Machine) String() string {
	return m.CPU + ", " + strconv.Itoa(m.Cores) + " cores, " + m.Memory + " RAM, " + m.OS + " (Linux " + m.Kernel + "), " + m.Go + ", " + m.Python
}

// Describe reads the machine's description from /proc, uname and the
// interpreter.
func Describe(ctx context.Context, python string) Machine {
	m := Machine{CPU: "unknown CPU", Cores: runtime.NumCPU(), Memory: "unknown", OS: "unknown OS", Go: runtime.Version(), Python: python}
	if v := procField("/proc/cpuinfo", "model name"); v != "" {
		m.CPU = v
	}
	if v := procField("/proc/meminfo", "MemTotal"); v != "" {
		if kb, err := strconv.Atoi(strings.Fields(v)[0]); err == nil {
			m.Memory = strconv.FormatFloat(float64(kb)/(1<<20), 'f', 1, 64) + " GiB"
		}
	}
	if data, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		var b strings.Builder
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			b.WriteByte(byte(c))
		}
		m.Kernel = b.String()
	}
	if out, err := exec.CommandContext(ctx, python, "-V").CombinedOutput(); err == nil {
		m.Python = strings.TrimSpace(string(out)) + " (" + python + ")"
	}
	return m
}

// procField returns the value of the first "key : value" line of a /proc
// file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
