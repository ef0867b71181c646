// Package idleconns bounds the connections a listener holds before they
// said anything: past a limit, the one that waited longest is closed. A
// peer of the protocol speaks as soon as it connects; a flood of idle
// connections ages out first, and cannot hold a listener's descriptors.
package idleconns

import (
	"net"
	"slices"
	"sync"
	"syscall"
)

// Queue is the connections that have not spoken yet, oldest first. The
// zero value is empty; it is safe for concurrent use.
type Queue struct {
	mu    sync.Mutex
	conns []net.Conn
}

// Add adds c, closing the oldest connections while more than limit wait.
func (q *Queue) Add(c net.Conn, limit int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.conns = append(q.conns, c)
	for len(q.conns) > limit {
		q.conns[0].Close()
		q.conns = q.conns[1:]
	}
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
