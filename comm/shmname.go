package comm

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Ring files are named
//
//	gorun-<pid>-<random>-<lower rank>-<higher rank>-<tag>-up|down
//
// in shmDir(): the creator's pid (so that a leftover file names its
// process), 8 random bytes, the pair, and a tag that ties the name to the
// job: the first 8 bytes of HMAC-SHA256 under the job's secret of the
// group's store prefix and the name's other fields. A peer sends only
// the name; the rank that maps it accepts nothing else (no '/', no '..',
// its own pair, the right tag) and then opens it without following a
// symbolic link, as a regular file of this user of the ring's size.
const shmPrefix = "gorun-"

// shmTag is the tag of a ring name whose other fields are fields.
func (cfg meshConfig) shmTag(fields string) string {
	return hex.EncodeToString(secretMAC(cfg.secret, labelShmName, []byte(cfg.prefix), []byte(fields))[:8])
}

// newShmNames names the two ring files of the pair (lower rank a,
// higher b).
func (cfg meshConfig) newShmNames(a, b int) (string, string, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", "", err
	}
	var names [2]string
	for i, dir := range []string{"up", "down"} {
		fields := fmt.Sprintf("%d-%s-%d-%d", os.Getpid(), hex.EncodeToString(rnd[:]), a, b)
		names[i] = shmPrefix + fields + "-" + cfg.shmTag(fields+"-"+dir) + "-" + dir
	}
	return names[0], names[1], nil
}

// checkShmName accepts name only if it is a ring name of this job for
// the pair (lower rank a, higher b) in direction dir; its errors say
// what is wrong and what is allowed.
func (cfg meshConfig) checkShmName(name string, a, b int, dir string) error {
	want := fmt.Sprintf("a name %s<pid>-<16 hex digits>-%d-%d-<tag>-%s in %s", shmPrefix, a, b, dir, shmDir())
	if strings.ContainsRune(name, '/') || strings.Contains(name, "..") || name == "" {
		return fmt.Errorf("ring name %.100q: a path: want %s", name, want)
	}
	rest, ok := strings.CutPrefix(name, shmPrefix)
	f := strings.Split(rest, "-")
	if !ok || len(f) != 6 || f[5] != dir {
		return fmt.Errorf("ring name %.100q: want %s", name, want)
	}
	if _, err := strconv.ParseUint(f[0], 10, 32); err != nil {
		return fmt.Errorf("ring name %.100q: the pid is not a number: want %s", name, want)
	}
	if _, ok := parseHex(f[1], 8); !ok {
		return fmt.Errorf("ring name %.100q: want %s", name, want)
	}
	if f[2] != strconv.Itoa(a) || f[3] != strconv.Itoa(b) {
		return fmt.Errorf("ring name %.100q: for ranks %s and %s: want %s", name, f[2], f[3], want)
	}
	fields := strings.Join(f[:4], "-")
	tag, ok := parseHex(f[4], 8)
	exp, _ := parseHex(cfg.shmTag(fields+"-"+dir), 8)
	if !ok || !hmacEqual(tag, exp) {
		return fmt.Errorf("ring name %.100q: its tag is not this job's (another job's file, or a stranger's): want %s", name, want)
	}
	return nil
}

// sweepDeadRings removes the ring files in dir that this user's processes
// created and that outlived them: a rank killed (SIGKILL, the OOM killer)
// between creating its rings and its peer mapping them leaves them, 8 MiB
// each, in a /dev/shm that a container may hold at 64 MiB. A file whose
// creator is alive, or whose pid another process took since, is kept.
// It returns how many it removed.
func sweepDeadRings(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	removed := 0
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), shmPrefix)
		f := strings.Split(rest, "-")
		if !ok || len(f) != 6 || (f[5] != "up" && f[5] != "down") || len(f[1]) != 16 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		info, err := e.Info()
		st, isStat := info.Sys().(*syscall.Stat_t)
		if err != nil || !isStat || !info.Mode().IsRegular() || int(st.Uid) != os.Getuid() {
			continue
		}
		if os.Remove(filepath.Join(dir, e.Name())) == nil {
			removed++
		}
	}
	return removed
}
