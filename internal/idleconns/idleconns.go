// Package idleconns bounds the connections a listener holds before they
// said anything: past a limit, the reader of the one that waited longest
// is cut off, and closes it. A peer of the protocol speaks as soon as it
// connects; a flood of idle connections ages out first, and cannot hold a
// listener's descriptors.
package idleconns

import (
	"net"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Queue is the connections that have not spoken yet, oldest first. The
// zero value is empty; it is safe for concurrent use.
type Queue struct {
	mu    sync.Mutex
	conns []net.Conn
}

// Add adds c, while more than limit wait cutting off the oldest
// connections that have not spoken: their read deadline is put in the
// past, which fails the read their reader waits in, and the reader closes
// them. A connection whose bytes wait in its socket has spoken, and only
// its reader has not come to it yet (a real peer on a loaded host, whose
// first line went out at once): it is passed over, until twice limit
// wait, when the oldest is cut off whatever it sent.
//
// A deadline, not a close, so that a reader that has just read its
// peer's first bytes (the socket empty again, and c not yet removed)
// keeps its connection: it calls Remove, then sets the deadline it
// wants. So c's reader sets its own read deadline before Add, and calls
// Remove before it changes it.
func (q *Queue) Add(c net.Conn, limit int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.conns = append(q.conns, c)
	for len(q.conns) > limit {
		i := 0
		if len(q.conns) <= 2*limit {
			if i = slices.IndexFunc(q.conns, silent); i < 0 {
				return
			}
		}
		// A deadline in the past ends a read that waits and fails the
		// next, and leaves what was read already to its reader.
		_ = q.conns[i].SetReadDeadline(time.Unix(1, 0))
		q.conns = slices.Delete(q.conns, i, i+1)
	}
}

// silent says whether nothing c's peer sent waits to be read: a peek that
// does not wait, and takes no lock a blocked reader of c holds. A
// connection whose peer closed, or that cannot be asked, is silent.
func silent(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	n := 0
	var b [1]byte
	if raw.Control(func(fd uintptr) {
		n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}) != nil {
		return true
	}
	return n <= 0
}

// Remove forgets c once it spoke or left.
func (q *Queue) Remove(c net.Conn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := slices.Index(q.conns, c); i >= 0 {
		q.conns = slices.Delete(q.conns, i, i+1)
	}
}

// Limit is at most most, and at most a quarter of this process's
// descriptor limit (at least 8): a cap that the descriptors run out
// before would never close anyone.
func Limit(most int) int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return most
	}
	return int(min(uint64(most), max(rl.Cur/4, 8)))
}
