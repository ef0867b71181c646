package agentstore

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// waiter is a parked WAIT (keys, of which keys[next] is the first still
// missing) or BARRIER (barrier, world) of one connection.
type waiter struct {
	c       *conn
	keys    []string
	next    int
	barrier string
	world   int64
}

// maxParked bounds the WAITs and BARRIERs one connection may have parked
// at once: a PyTorch client waits for one at a time.
const maxParked = 4

// have reports whether every key exists, as a key or a queue that is not
// empty; s.mu held.
func (s *Server) have(keys []string) bool {
	for _, k := range keys {
		if !s.present(k) {
			return false
		}
	}
	return true
}

// present reports whether key exists, as a key or a queue that is not
// empty; s.mu held.
func (s *Server) present(key string) bool {
	_, ok := s.keys[key]
	return ok || len(s.queues[key]) > 0
}

// update runs f under the lock, then answers the waits that the keys f
// set complete.
func (s *Server) update(keys []string, f func()) {
	s.mu.Lock()
	f()
	var ready []*waiter
	for _, k := range keys {
		ready = append(ready, s.wake(k, -1)...)
	}
	s.mu.Unlock()
	s.release(ready)
}

// index parks w at the first of its keys still missing, and says whether
// none is (then it is not parked); s.mu held. A WAIT is looked at again
// only when the key it waits for appears, so that a SET costs the waits
// for that key, not every parked one (PyTorch's server keeps them so
// too): a client that parks WAITs of many keys slows no one else.
func (s *Server) index(w *waiter) bool {
	for w.next < len(w.keys) && s.present(w.keys[w.next]) {
		w.next++
	}
	if w.next == len(w.keys) {
		return true
	}
	k := w.keys[w.next]
	s.waiting[k] = append(s.waiting[k], w)
	return false
}

// wake looks at the WAITs that wait for key, now present, and returns
// those it completes, at most limit of them (-1: all), no longer parked;
// the others wait for their next missing key; s.mu held.
func (s *Server) wake(key string, limit int) []*waiter {
	ws := s.waiting[key]
	if len(ws) == 0 {
		return nil
	}
	delete(s.waiting, key)
	var ready []*waiter
	for i, w := range ws {
		if limit == 0 {
			s.waiting[key] = append(s.waiting[key], ws[i:]...)
			break
		}
		if s.index(w) {
			ready = append(ready, w)
			w.c.unpark(w)
			limit--
		}
	}
	return ready
}

// park records w as c's, refusing more than maxParked at once; s.mu held.
func (c *conn) park(w *waiter) error {
	if len(c.parked) >= maxParked {
		return fmt.Errorf("%w: more than %d WAITs or BARRIERs parked at once", errBadQuery, maxParked)
	}
	c.parked = append(c.parked, w)
	return nil
}

// unpark forgets w, answered; s.mu held.
func (c *conn) unpark(w *waiter) {
	if i := slices.Index(c.parked, w); i >= 0 {
		c.parked = slices.Delete(c.parked, i, i+1)
	}
}

// dropWaits removes c's parked waits; s.mu held.
func (s *Server) dropWaits(c *conn) {
	for _, w := range c.parked {
		if w.barrier != "" {
			s.barriers[w.barrier] = slices.DeleteFunc(s.barriers[w.barrier], func(o *waiter) bool { return o == w })
			continue
		}
		k := w.keys[w.next]
		s.waiting[k] = slices.DeleteFunc(s.waiting[k], func(o *waiter) bool { return o == w })
		if len(s.waiting[k]) == 0 {
			delete(s.waiting, k)
		}
	}
	c.parked = nil
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
	if err := w.c.park(w); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.index(w) {
		w.c.unpark(w)
		s.mu.Unlock()
		return w.c.reply([]byte{stopWaiting})
	}
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
	ready := s.wake(key, -1) // the counter is a key WAITs may want
	if n < world {
		w := &waiter{c: c, barrier: key, world: world}
		if err := c.park(w); err != nil {
			s.mu.Unlock()
			s.release(ready)
			return err
		}
		s.barriers[key] = append(s.barriers[key], w)
		s.mu.Unlock()
		s.release(ready)
		return nil
	}
	for _, w := range s.barriers[key] {
		w.c.unpark(w)
		ready = append(ready, w)
	}
	delete(s.barriers, key)
	s.mu.Unlock()
	s.release(ready)
	return c.reply([]byte{stopWaiting})
}

// push appends v to the queue at key and wakes one WAIT that it
// completes (the one that will pop it).
func (s *Server) push(key string, v []byte) {
	s.mu.Lock()
	s.queues[key] = append(s.queues[key], v)
	ready := s.wake(key, 1)
	s.mu.Unlock()
	s.release(ready)
}
