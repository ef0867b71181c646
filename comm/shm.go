package comm

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// shmRingSize is the data capacity of one direction of a shared-memory
// link.
const shmRingSize = 8 << 20

// shmHeader holds the ring's counters, each on its own cache line: head
// is what the producer wrote in total, tail what the consumer read.
const shmHeader = 128

// shmRing is one direction of a shared-memory link: a byte ring in a
// file mapped by both processes.
type shmRing struct {
	mem  []byte
	head *uint64
	tail *uint64
	data []byte
}

func mapRing(path string, create bool) (*shmRing, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := shmHeader + shmRingSize
	if create {
		if err := f.Truncate(int64(size)); err != nil {
			return nil, err
		}
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &shmRing{mem: mem, head: (*uint64)(unsafe.Pointer(&mem[0])), tail: (*uint64)(unsafe.Pointer(&mem[64])), data: mem[shmHeader:]}, nil
}

func (r *shmRing) unmap() { _ = syscall.Munmap(r.mem) }

// shmLink carries one peer's messages in shared memory; the peer's TCP
// connection stays open to learn at once when it dies.
type shmLink struct {
	out, in *shmRing
	dead    *atomic.Bool
}

// newShmPaths names a pair of ring files in /dev/shm.
func newShmPaths(a, b int) (string, string, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", "", err
	}
	base := filepath.Join(shmDir(), fmt.Sprintf("gorun-%d-%s-%d-%d", os.Getpid(), hex.EncodeToString(rnd[:]), a, b))
	return base + "-up", base + "-down", nil
}

func shmDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// wait spins, then yields, then sleeps a little, until cond holds, the
// deadline passes or the peer is gone.
func (l *shmLink) wait(cond func() bool, deadline time.Time, what string) error {
	for i := 0; !cond(); i++ {
		switch {
		case l.dead.Load():
			// The peer may have written its last bytes and exited between
			// the check above and this one: look once more.
			if cond() {
				return nil
			}
			return fmt.Errorf("%s: the peer's connection closed (it may have exited)", what)
		case i < 64:
		case i < 1024:
			runtime.Gosched()
		default:
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: timed out (the peer is stuck or gone)", what)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	return nil
}

// write copies b into the outgoing ring as space frees up.
func (l *shmLink) write(b []byte, deadline time.Time) error {
	r := l.out
	size := uint64(len(r.data))
	for len(b) > 0 {
		var head, free uint64
		if err := l.wait(func() bool {
			head = atomic.LoadUint64(r.head)
			free = size - (head - atomic.LoadUint64(r.tail))
			return free > 0
		}, deadline, "shared-memory send"); err != nil {
			return err
		}
		n := min(free, uint64(len(b)))
		off := head % size
		k := copy(r.data[off:min(off+n, size)], b[:n])
		copy(r.data, b[k:n])
		atomic.StoreUint64(r.head, head+n)
		b = b[n:]
	}
	return nil
}

// read fills b from the incoming ring.
func (l *shmLink) read(b []byte, deadline time.Time) error {
	r := l.in
	size := uint64(len(r.data))
	for len(b) > 0 {
		var tail, avail uint64
		if err := l.wait(func() bool {
			tail = atomic.LoadUint64(r.tail)
			avail = atomic.LoadUint64(r.head) - tail
			return avail > 0
		}, deadline, "shared-memory receive"); err != nil {
			return err
		}
		n := min(avail, uint64(len(b)))
		off := tail % size
		k := copy(b[:n], r.data[off:min(off+n, size)])
		copy(b[k:n], r.data)
		atomic.StoreUint64(r.tail, tail+n)
		b = b[n:]
	}
	return nil
}

func (l *shmLink) close() {
	l.out.unmap()
	l.in.unmap()
}
