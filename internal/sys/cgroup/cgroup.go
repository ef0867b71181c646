// Package cgroup finds this process's cgroup v2 directory, where gorun
// makes the cgroup of a job (launcher/jobgroup.go).
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Own returns this process's cgroup v2 directory.
func Own() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var path string
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			path, found = rest, true
			break
		}
	}
	if !found {
		return "", errors.New("this process is in no cgroup v2")
	}
	// The usual mounts first (unified, then hybrid), where the file
	// system's root is the namespace's root; mountinfo otherwise.
	for _, mount := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		dir := filepath.Join(mount, path)
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil && isCgroup2(mount) {
			return dir, nil
		}
	}
	mount, root, err := Mount()
	if err != nil {
		return "", err
	}
	rel, ok := strings.CutPrefix(path, root)
	if !ok {
		return "", fmt.Errorf("this process's cgroup %s is outside the mounted %s", path, root)
	}
	return filepath.Join(mount, rel), nil
}

// isCgroup2 reports whether dir is the root of a cgroup v2 file system.
func isCgroup2(dir string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && st.Type == cgroup2SuperMagic
}

// cgroup2SuperMagic is CGROUP2_SUPER_MAGIC, cgroup v2's file system type.
const cgroup2SuperMagic = 0x63677270

// Mount finds the cgroup v2 mount in /proc/self/mountinfo: its mount
// point and the cgroup path at its root.
func Mount() (mount, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mount-point options ... - fstype source super-options
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], fields[3], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", err
	}
	return "", "", errors.New("no cgroup v2 file system is mounted")
}
