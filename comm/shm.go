package comm

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// shmRingSize is the data capacity of one direction of a shared-memory
// link.
const shmRingSize = 8 << 20

// shmHeader holds the ring's counters on two cache lines: the
// producer's (head: what it wrote in total, and the data event) and the
// consumer's (tail: what it read, and the space event).
const shmHeader = 128

// shmRing is one direction of a shared-memory link: a byte ring in a
// file mapped by both processes.
type shmRing struct {
	mem  []byte
	head *uint64
	tail *uint64
	data []byte
	// readers and writers count the consumer and the producer while
	// they sleep (see shmLink.wait).
	readers, writers *uint32
}

// shmFileSize is the size of a ring file: header and data.
const shmFileSize = shmHeader + shmRingSize

// mapRing maps the ring file at path: created afresh (it must not
// exist), or opened as a peer named it, which it must be a regular file
// of this user of shmFileSize bytes, not a symbolic link.
func mapRing(path string, create bool) (_ *shmRing, err error) {
	flags := syscall.O_RDWR | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	if create {
		flags |= syscall.O_CREAT | syscall.O_EXCL
	}
	fd, err := syscall.Open(path, flags, 0o600)
	if err != nil {
		if err == syscall.ELOOP {
			return nil, fmt.Errorf("open %s: a symbolic link: want the ring file itself", path)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	if create {
		// A ring that fails is never left behind.
		defer func() {
			if err != nil {
				os.Remove(path)
			}
		}()
		// The pages are taken now: on a tmpfs that cannot hold them (a
		// container's 64 MiB /dev/shm) the first write to a page would
		// otherwise kill the process with SIGBUS.
		if err := syscall.Fallocate(fd, 0, 0, shmFileSize); err != nil {
			if err == syscall.ENOSPC {
				return nil, shmFullError(filepath.Dir(path))
			}
			return nil, &os.PathError{Op: "allocate", Path: path, Err: err}
		}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return nil, fmt.Errorf("%s: not a regular file: want a ring file", path)
	case int(st.Uid) != os.Getuid():
		return nil, fmt.Errorf("%s: owned by uid %d: want this user's (%d)", path, st.Uid, os.Getuid())
	case st.Size != shmFileSize:
		return nil, fmt.Errorf("%s: %d bytes: want a ring file of %d", path, st.Size, shmFileSize)
	}
	mem, err := syscall.Mmap(fd, 0, shmFileSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	word := func(off int) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	return &shmRing{mem: mem, head: (*uint64)(unsafe.Pointer(&mem[0])), tail: (*uint64)(unsafe.Pointer(&mem[64])), data: mem[shmHeader:],
		readers: word(8), writers: word(72)}, nil
}

func (r *shmRing) unmap() { _ = syscall.Munmap(r.mem) }

// prefault writes to every page of the ring's data, which the producer
// does before any message: a page first written in the middle of a
// collective costs a fault (MAP_POPULATE maps the pages for reading
// only), and a 256 KiB all-reduce took 1.1-2.5 ms instead of 0.3 until
// the ring had gone round once.
func (r *shmRing) prefault() {
	for off := 0; off < len(r.data); off += os.Getpagesize() {
		r.data[off] = 0
	}
}

// shmLink carries one peer's messages in shared memory. The peer's TCP
// connection stays open: its close says at once that the peer died, and
// a byte on it is a doorbell: a side that waits long sleeps (its count
// in the ring's header tells the other side) until the other side moves
// and rings. The sleeper parks in Go's network poller, so it holds no
// thread and no P while it waits.
type shmLink struct {
	out, in *shmRing
	conn    net.Conn
	// dead: the connection ended (the watcher saw it); closed: this
	// rank shut the link down (set before its connection is closed).
	dead, closed atomic.Bool
	// The sending and the receiving side each have their own bell and
	// timer: they may wait at the same time, on different goroutines.
	sendSide, recvSide shmSleeper
}

// shmSleeper is what one side needs to sleep: its bell, filled by the
// connection's watcher, and its timer.
type shmSleeper struct {
	bell chan struct{}
	nap  *time.Timer
}

func newShmSleeper() shmSleeper {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return shmSleeper{bell: make(chan struct{}, 1), nap: t}
}

func newShmLink(out, in *shmRing, conn net.Conn) *shmLink {
	return &shmLink{out: out, in: in, conn: conn, sendSide: newShmSleeper(), recvSide: newShmSleeper()}
}

// rang is the watcher's news of a doorbell (or of the peer's death): it
// wakes both sides, and each checks whether its own wait is over.
func (l *shmLink) rang() {
	for _, bell := range []chan struct{}{l.sendSide.bell, l.recvSide.bell} {
		select {
		case bell <- struct{}{}:
		default:
		}
	}
}

// ring wakes the peer if it sleeps on sleepers.
func (l *shmLink) ring(sleepers *uint32) {
	if atomic.LoadUint32(sleepers) > 0 {
		_, _ = l.conn.Write(doorbell[:])
	}
}

var doorbell = [1]byte{'!'}

func shmDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// shmSpins is how often wait checks before it sleeps: enough to catch a
// peer running on another core, short enough not to steal the core from
// one that is not (2 cores, several ranks).
const shmSpins = 200

// shmNap bounds one sleep, so that deadlines are kept.
const shmNap = 10 * time.Millisecond

// wait spins a little, then sleeps until the peer rings, until cond
// holds, the deadline passes or the peer is gone. sleepers is this
// side's count in the ring's header.
func (l *shmLink) wait(cond func() bool, side *shmSleeper, sleepers *uint32, deadline time.Time, what string) error {
	for range shmSpins {
		if cond() {
			return nil
		}
	}
	for {
		atomic.AddUint32(sleepers, 1)
		ok := cond()
		if !ok && !l.dead.Load() {
			side.nap.Reset(max(time.Microsecond, min(shmNap, time.Until(deadline))))
			select {
			case <-side.bell:
			case <-side.nap.C:
			}
			side.nap.Stop()
			ok = cond()
		}
		atomic.AddUint32(sleepers, ^uint32(0))
		switch {
		case ok:
			return nil
		case l.closed.Load():
			return fmt.Errorf("%s: the link was closed on this side (the group was shut down)", what)
		case l.dead.Load():
			// The peer may have written its last bytes and exited between
			// the check above and this one: look once more.
			if cond() {
				return nil
			}
			return fmt.Errorf("%s: the peer closed its connection (it was stopped, or it exited)", what)
		case time.Now().After(deadline):
			return fmt.Errorf("%s: timed out (the peer is stuck or gone)", what)
		}
	}
}

// write copies b into the outgoing ring as space frees up.
func (l *shmLink) write(b []byte, deadline time.Time) error {
	r := l.out
	size := uint64(len(r.data))
	for len(b) > 0 {
		// Never write into a link that is going: the rest of a message
		// cut short would reach the peer as the start of the next one.
		if l.closed.Load() {
			return errors.New("shared-memory send: the link was closed on this side (the group was shut down)")
		}
		if l.dead.Load() {
			return errors.New("shared-memory send: the peer closed its connection (it was stopped, or it exited)")
		}
		var head, free uint64
		if err := l.wait(func() bool {
			head = atomic.LoadUint64(r.head)
			free = size - (head - atomic.LoadUint64(r.tail))
			return free > 0
		}, &l.sendSide, r.writers, deadline, "shared-memory send"); err != nil {
			return err
		}
		n := min(free, uint64(len(b)))
		off := head % size
		k := copy(r.data[off:min(off+n, size)], b[:n])
		copy(r.data, b[k:n])
		atomic.StoreUint64(r.head, head+n)
		l.ring(r.readers)
		b = b[n:]
	}
	return nil
}

// read fills b from the incoming ring.
func (l *shmLink) read(b []byte, deadline time.Time) error {
	r := l.in
	size := uint64(len(r.data))
	for len(b) > 0 {
		if l.closed.Load() {
			return errors.New("shared-memory receive: the link was closed on this side (the group was shut down)")
		}
		var tail, avail uint64
		if err := l.wait(func() bool {
			tail = atomic.LoadUint64(r.tail)
			avail = atomic.LoadUint64(r.head) - tail
			return avail > 0
		}, &l.recvSide, r.readers, deadline, "shared-memory receive"); err != nil {
			return err
		}
		n := min(avail, uint64(len(b)))
		off := tail % size
		k := copy(b[:n], r.data[off:min(off+n, size)])
		copy(b[k:n], r.data)
		atomic.StoreUint64(r.tail, tail+n)
		l.ring(r.writers)
		b = b[n:]
	}
	return nil
}

func (l *shmLink) close() {
	l.out.unmap()
	l.in.unmap()
}

// shmFullError says that dir (the shared-memory folder) cannot hold a
// ring, with its size and what is free, and what to do.
func shmFullError(dir string) error {
	var fs syscall.Statfs_t
	size := ""
	if syscall.Statfs(dir, &fs) == nil {
		size = fmt.Sprintf(" (%d MiB, %d MiB free)", uint64(fs.Blocks)*uint64(fs.Bsize)>>20, uint64(fs.Bavail)*uint64(fs.Bsize)>>20)
	}
	return fmt.Errorf("%s is full%s: a pair of ranks on one host needs two rings of %d MiB; give it more room (docker run --shm-size, a Kubernetes emptyDir of medium Memory) or set %s=tcp", dir, size, shmFileSize>>20, TransportEnv)
}
