package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of the times in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux architecture gorun builds for).
const userHZ = 100

// CPUTime is the CPU time process pid has used, user and system, all its
// threads (not its children), from /proc/<pid>/stat.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields that
	// count start after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state(3) ... utime(14) stime(15), counted from 1.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields, want 15 or more", pid, len(f)+2)
	}
	user, err1 := strconv.ParseInt(f[11], 10, 64)
	sys, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q: want numbers", pid, f[11], f[12])
	}
	return time.Duration(user+sys) * time.Second / userHZ, nil
}

// Catches reports whether process pid has a handler for sig (its SigCgt
// in /proc/<pid>/status): a signal whose default action ends a process
// is safe to send it then.
func Catches(pid int, sig syscall.Signal) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "SigCgt:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return false, fmt.Errorf("/proc/%d/status: SigCgt %q: want a hexadecimal mask", pid, strings.TrimSpace(v))
		}
		return sig >= 1 && sig <= 64 && mask&(1<<(sig-1)) != 0, nil
	}
	return false, fmt.Errorf("/proc/%d/status: no SigCgt line", pid)
}

// TreeCPUTimes returns the CPU time used by each of roots and everything
// it started, keyed by root: every process whose parent chain leads to
// the root, or that is in the root's process group (a child orphaned to
// init stays there), each with all its threads and its reaped children's
// time, from /proc/<pid>/stat. A worker that computes in its children (a
// data loader's workers, a subprocess, one in a session of its own)
// uses CPU time in its tree though its own is idle. Processes that end
// while it reads are left out.
func TreeCPUTimes(roots []int) (map[int]time.Duration, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	type stat struct {
		ppid, pgrp int
		cpu        time.Duration
	}
	procs := map[int]stat{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		// After the name: state(3) ppid(4) pgrp(5) ... utime(14)
		// stime(15) cutime(16) cstime(17), counted from 1.
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 15 {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		pgrp, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			continue
		}
		var ticks int64
		for _, v := range f[11:15] {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				ticks += n
			}
		}
		procs[pid] = stat{ppid: ppid, pgrp: pgrp, cpu: time.Duration(ticks) * time.Second / userHZ}
	}
	isRoot := map[int]bool{}
	for _, r := range roots {
		isRoot[r] = true
	}
	out := map[int]time.Duration{}
	for pid, st := range procs {
		root := 0
		switch {
		case isRoot[pid]:
			root = pid
		case isRoot[st.pgrp]:
			root = st.pgrp
		default:
			for p, hops := st.ppid, 0; p > 1 && hops < 64; hops++ {
				if isRoot[p] {
					root = p
					break
				}
				p = procs[p].ppid
			}
		}
		if root != 0 {
			out[root] += st.cpu
		}
	}
	return out, nil
}

// MemAvailable is the memory the kernel says new work may use without
// swapping (/proc/meminfo's MemAvailable), in bytes; false if unknown.
func MemAvailable() (uint64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseUint(f[0], 10, 64); err == nil {
					return kb << 10, true
				}
			}
		}
	}
	return 0, false
}
