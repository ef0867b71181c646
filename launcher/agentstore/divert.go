package agentstore

import (
	"bufio"
	"net"
	"sync"
	"time"

	"github.com/gorun-dev/gorun/internal/idleconns"
)

// diverted is the listener of the connections that Divert hands to
// another protocol.
type diverted struct {
	s     *Server
	first byte
	// wait and maxWaiting bound the connections that have not sent their
	// first byte yet: a flood of idle ones ages out (idleconns).
	wait       time.Duration
	maxWaiting int
	waiting    idleconns.Queue
	conns      chan net.Conn
	done       chan struct{}
	once       sync.Once
}

// Divert hands the connections whose first byte is first to the returned
// listener instead of serving them, and closes those that begin with any
// other byte, until that listener is closed: then they are the store's
// again (which closes a meeting's line, as a query it cannot read). No
// worker uses the store while the divert is open. Another protocol shares the port so that it stays held from
// that protocol's first use to the workers' last: the static backend's
// meeting of the nodes, whose JSON lines begin with '{', a byte that
// begins no query of the store. While it is open, a connection has wait
// to send its first byte, and at most maxWaiting wait at once (past it,
// the one that waited longest is closed): the other protocol's peers
// speak at once, and no flood of idle connections holds the port's
// descriptors. At most one divert is open at a time.
func (s *Server) Divert(first byte, wait time.Duration, maxWaiting int) net.Listener {
	d := &diverted{s: s, first: first, wait: wait, maxWaiting: idleconns.Limit(maxWaiting), conns: make(chan net.Conn), done: make(chan struct{})}
	s.mu.Lock()
	s.divert = d
	s.mu.Unlock()
	return d
}

// diverts hands c to the open divert if its first byte is the divert's,
// or closes it if it sends none in time, and says whether it did either;
// the store then forgets c (without closing a connection it handed on).
func (s *Server) diverts(c *conn) bool {
	s.mu.Lock()
	d := s.divert
	s.mu.Unlock()
	if d == nil {
		return false
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(d.wait))
	d.waiting.Add(c.nc, d.maxWaiting)
	head, err := c.r.Peek(1)
	d.waiting.Remove(c.nc)
	_ = c.nc.SetReadDeadline(time.Time{})
	if err != nil {
		c.nc.Close() // silent past the wait, or cut off for a newer caller
		s.forget(c)
		return true
	}
	if head[0] != d.first {
		// No worker uses the store before the meeting ends: whatever
		// else speaks first while it lasts is a stranger.
		c.nc.Close()
		s.forget(c)
		return true
	}
	select {
	case d.conns <- &peekedConn{Conn: c.nc, r: c.r}:
		s.forget(c)
		return true
	case <-d.done:
		return false // served, and refused, as the store's
	case <-s.done:
		return false
	}
}

// Accept returns the next diverted connection.
func (d *diverted) Accept() (net.Conn, error) {
	select {
	case c := <-d.conns:
		return c, nil
	case <-d.done:
		return nil, net.ErrClosed
	case <-d.s.done:
		return nil, net.ErrClosed
	}
}

// Close ends the divert; the port stays the store's.
func (d *diverted) Close() error {
	d.once.Do(func() {
		close(d.done)
		d.s.mu.Lock()
		if d.s.divert == d {
			d.s.divert = nil
		}
		d.s.mu.Unlock()
	})
	return nil
}

// Addr is the store's address.
func (d *diverted) Addr() net.Addr { return d.s.ln.Addr() }

// peekedConn is a connection whose first bytes were read ahead into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *peekedConn) Read(b []byte) (int, error) { return p.r.Read(b) }
