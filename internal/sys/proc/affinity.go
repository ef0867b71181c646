package proc

import (
	"fmt"
	"syscall"
	"unsafe"
)

// cpuMask is a CPU set as sched_setaffinity(2) takes it: 1,024 CPUs, the
// kernel's usual CONFIG_NR_CPUS ceiling on large machines.
type cpuMask [1024 / 64]uint64

// Affinity lists the CPUs this process's calling thread may run on
// (sched_getaffinity(2)); gorun's threads all share the process's.
func Affinity() ([]int, error) {
	var mask cpuMask
	if _, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask[0]))); errno != 0 {
		return nil, errno
	}
	var out []int
	for i, word := range mask {
		for b := range 64 {
			if word&(1<<b) != 0 {
				out = append(out, i*64+b)
			}
		}
	}
	return out, nil
}

// setThreadAffinity binds the calling OS thread (locked by the caller)
// to cpus; a child it forks inherits the binding.
func setThreadAffinity(cpus []int) error {
	var mask cpuMask
	for _, c := range cpus {
		if c < 0 || c >= len(mask)*64 {
			return fmt.Errorf("CPU %d: want 0 to %d", c, len(mask)*64-1)
		}
		mask[c/64] |= 1 << (c % 64)
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask[0]))); errno != 0 {
		return fmt.Errorf("sched_setaffinity %v: %w", cpus, errno)
	}
	return nil
}
