package agentstore

import (
	"strconv"
	"time"
)

// waiter is a parked WAIT (keys) or BARRIER (barrier, world) of one
// connection.
type waiter struct {
	c       *conn
	keys    []string
	barrier string
	world   int64
}

// have reports whether every key exists, as a key or a queue that is not
// empty; s.mu held.
func (s *Server) have(keys []string) bool {
	for _, k := range keys {
		if _, ok := s.keys[k]; !ok && len(s.queues[k]) == 0 {
			return false
		}
	}
	return true
}

// update runs f under the lock, then answers the waits whose keys now
// all exist.
func (s *Server) update(f func()) {
	s.mu.Lock()
	f()
	ready := s.takeReady(-1)
	s.mu.Unlock()
	s.release(ready)
}

// takeReady removes and returns the WAITs whose keys all exist, at most
// limit of them (-1: all); s.mu held.
func (s *Server) takeReady(limit int) []*waiter {
	var ready []*waiter
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if w.barrier == "" && limit != 0 && s.have(w.keys) {
			ready = append(ready, w)
			limit--
			continue
		}
		kept = append(kept, w)
	}
	s.waiters = kept
	return ready
}

// releaseWriteTimeout bounds how long a waiter's release may wait for
// its connection to take the reply: past it, that connection is closed.
const releaseWriteTimeout = 30 * time.Second

// release tells each waiter to stop waiting, each in a goroutine of the
// server's own: the caller that made the keys (a worker's SET) never
// waits on another client's connection, which may not be reading (a
// stranger that parked a WAIT and stopped reading would otherwise hold
// every setter of its keys). A connection gone since is no matter.
func (s *Server) release(ws []*waiter) {
	for _, w := range ws {
		s.wg.Go(func() {
			if w.c.replyWithin(releaseWriteTimeout, []byte{stopWaiting}) != nil {
				w.c.nc.Close()
			}
		})
	}
}

// wait answers at once when the keys exist, else parks the caller.
func (s *Server) wait(w *waiter) error {
	s.mu.Lock()
	if s.have(w.keys) {
		s.mu.Unlock()
		return w.c.reply([]byte{stopWaiting})
	}
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	return nil
}

// barrier adds the caller to the barrier at key (a counter, as PyTorch
// keeps it): once world callers came, every one is released.
func (s *Server) barrier(c *conn, key string, world int64) error {
	s.mu.Lock()
	n, _ := strconv.ParseInt(string(s.keys[key]), 10, 64)
	n++
	s.keys[key] = []byte(strconv.FormatInt(n, 10))
	ready := s.takeReady(-1) // the counter is a key WAITs may want
	if n < world {
		s.waiters = append(s.waiters, &waiter{c: c, barrier: key, world: world})
		s.mu.Unlock()
		s.release(ready)
		return nil
	}
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if w.barrier == key {
			ready = append(ready, w)
			continue
		}
		kept = append(kept, w)
	}
	s.waiters = kept
	s.mu.Unlock()
	s.release(ready)
	return c.reply([]byte{stopWaiting})
}

// push appends v to the queue at key and wakes one WAIT that it
// completes (the one that will pop it).
func (s *Server) push(key string, v []byte) {
	s.mu.Lock()
	s.queues[key] = append(s.queues[key], v)
	ready := s.takeReady(1)
	s.mu.Unlock()
	s.release(ready)
}
