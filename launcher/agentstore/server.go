// Package agentstore is the workers' store served by the agent itself, as
// torchrun 2.x serves it: a server of PyTorch's c10d TCPStore protocol,
// for clients of PyTorch 2.x (which open each connection with a
// validation message) and 1.x (which do not; their operations are
// numbered differently). The agent binds the port before it hands it to
// the workers (MASTER_PORT, with TORCHELASTIC_USE_AGENT_STORE=True), so
// that no other process can take it between the choice and rank 0's use,
// as it could when rank 0 bound a port the launcher had only probed.
//
// The store keeps keys, counters and queues in memory; WAIT and BARRIER
// park the caller until their keys exist or the barrier fills, and a
// 2.x client's CANCEL_WAIT takes a parked wait back. Reset empties it
// between attempts: PyTorch 2.x workers use the same keys on every
// attempt. Like PyTorch's own, the store has no authentication: anyone
// who reaches the port can read and write it.
package agentstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
)

// Server serves one store on a listener it owns. Its methods are safe for
// concurrent use.
type Server struct {
	ln  net.Listener
	log logrus.FieldLogger

	mu     sync.Mutex
	keys   map[string][]byte
	queues map[string][][]byte
	// waiting are the parked WAITs by the key each waits for next;
	// barriers the parked BARRIERs by their key.
	waiting  map[string][]*waiter
	barriers map[string][]*waiter
	conns    map[*conn]struct{}
	divert   *diverted // nil: every connection is the store's
	closed   bool
	done     chan struct{} // closed by Close

	wg sync.WaitGroup // the accept loop and the connections
}

// Listen binds port on every address of the host (the wildcard, as
// PyTorch's TCPStore binds it; 0: a port the kernel picks) and returns a
// server that does not serve yet. log hears of connections closed for a
// query that is not the protocol.
func Listen(port int, log logrus.FieldLogger) (*Server, error) {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("workers' store: listen on port %d: %w", port, err)
	}
	return &Server{ln: ln, log: log, keys: map[string][]byte{}, queues: map[string][][]byte{},
		waiting: map[string][]*waiter{}, barriers: map[string][]*waiter{}, conns: map[*conn]struct{}{}, done: make(chan struct{})}, nil
}

// Port is the port the server holds.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Serve accepts connections until ctx ends or Close; it returns at once,
// the server's goroutines running until then.
func (s *Server) Serve(ctx context.Context) {
	s.wg.Go(func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.done:
		}
	})
	s.wg.Go(func() {
		var backoff ctxtime.AcceptBackoff
		starved := false // said once per run of descriptor errors
		for {
			nc, err := s.ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				if !starved && (errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) {
					starved = true
					s.log.Warnf("workers' store: %v: accepting again as connections close (a flood of connections to the port?)", err)
				}
				if !backoff.Wait(s.done) {
					return
				}
				continue // an accept error that passes (EMFILE, an aborted connection)
			}
			backoff.Reset()
			starved = false
			if tc, ok := nc.(*net.TCPConn); ok {
				_ = tc.SetNoDelay(true)
			}
			c := newConn(s, nc)
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				nc.Close()
				return
			}
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Go(c.serve)
		}
	})
}

// Reset empties the store and drops every connection, for the next
// attempt's workers: the last attempt's are gone, and PyTorch 2.x's use
// the same keys again.
func (s *Server) Reset() {
	s.mu.Lock()
	s.keys, s.queues = map[string][]byte{}, map[string][][]byte{}
	s.waiting, s.barriers = map[string][]*waiter{}, map[string][]*waiter{}
	conns := s.conns
	s.conns = map[*conn]struct{}{}
	s.mu.Unlock()
	for c := range conns {
		c.nc.Close()
	}
}

// Close stops the server: the listener and every connection (Wait waits
// for its goroutines).
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	conns := s.conns
	s.conns = nil
	s.waiting, s.barriers = map[string][]*waiter{}, map[string][]*waiter{}
	s.mu.Unlock()
	err := s.ln.Close()
	for c := range conns {
		c.nc.Close()
	}
	return err
}

// Wait waits for the server's goroutines after Close or the end of
// Serve's context.
func (s *Server) Wait() { s.wg.Wait() }

// WaitIdle waits until no client is connected (a connection that never
// sent a query does not count), or max passed, or ctx ended, and says
// whether the store went idle. The master node's agent
// of a static job calls it once its own workers succeeded: the other
// nodes' workers may still be reading keys, and nothing else tells the
// agent when they are done.
func (s *Server) WaitIdle(ctx context.Context, max time.Duration) bool {
	deadline := time.Now().Add(max)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		idle := true
		for c := range s.conns {
			idle = idle && !c.spoke.Load()
		}
		s.mu.Unlock()
		if idle {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return false
		case <-s.done:
			return true
		}
	}
}

// forget drops a closed connection and its parked waits.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	s.dropWaits(c)
}
