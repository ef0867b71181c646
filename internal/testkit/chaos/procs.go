package chaos

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// markEnv marks every process of a round: the agents get it, and their
// store members, workers and the workers' children inherit it.
const markEnv = "GORUN_CHAOS_MARK"

// marked lists the live processes whose environment holds mark (as
// markEnv=mark); zombies are left out, as they are only waiting to be
// reaped.
func marked(mark string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if isMarked(pid, mark) {
			out = append(out, pid)
		}
	}
	return out
}

// isMarked reports whether pid is a live (not zombie) process whose
// environment holds mark.
func isMarked(pid int, mark string) bool {
	want := []byte(markEnv + "=" + mark + "\x00")
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, want...)) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) STATE ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}

// killMarked SIGKILLs every process of mark (after a failed check, so
// that nothing outlives the suite).
func killMarked(mark string) {
	for _, pid := range marked(mark) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// shmFiles lists gorun's files in /dev/shm (the CPU backend's rings,
// gorun-<pid>-...).
func shmFiles() map[string]bool {
	out := map[string]bool{}
	names, _ := filepath.Glob("/dev/shm/gorun-*")
	for _, n := range names {
		out[filepath.Base(n)] = true
	}
	return out
}

// leakedShm lists the gorun files in /dev/shm that are not in before and
// whose maker (the pid in the name) is gone: left behind by this round.
// A live maker's file is another job's, in use.
func leakedShm(before map[string]bool) []string {
	var out []string
	for name := range shmFiles() {
		if before[name] {
			continue
		}
		f := strings.Split(strings.TrimPrefix(name, "gorun-"), "-")
		pid, err := strconv.Atoi(f[0])
		if err == nil && syscall.Kill(pid, 0) == nil {
			continue
		}
		out = append(out, name)
	}
	return out
}

// workerScript is what every worker runs: it says that it starts (node,
// rank, world), records its pid for the injector, starts two children
// that stand for a data loader's processes (one in the worker's process
// group, one in a session of its own, which only the job's cgroup or
// guardian can find), then becomes the training program.
const workerScript = `#!/bin/sh
echo "chaos: start node=$GORUN_CHAOS_NODE rank=$RANK world=$WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT"
echo $$ > "$GORUN_CHAOS_DIR/worker.$GORUN_CHAOS_NODE.$LOCAL_RANK"
sleep 600 &
setsid sleep 600 &
exec "$@"
`
