package comm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Store is where ranks meet: Set publishes a value, Get waits until the
// key is set.
type Store interface {
	Set(ctx context.Context, key, value string) error
	Get(ctx context.Context, key string) (string, error)
}

// StoreServer is a tiny store served over TCP by rank 0 (as PyTorch's
// TCPStore is).
//
// A connection first authenticates (docs/comm.md): the server sends
// "GORUN-STORE 1 <nonce>", the client answers "AUTH <its nonce> <MAC>"
// and the server proves itself back with "OK <MAC>"; the MACs are
// HMAC-SHA256 under the job's secret of a label and both nonces, so the
// secret never crosses the wire. A connection that fails gets one "ERR"
// line and is closed; one that says nothing is closed after
// DefaultHandshakeTimeout; at most maxPendingAuth connections are
// authenticated at once (the others wait in the listener's backlog).
//
// Then one line per request: "SET key value", "GET key" (answered once
// the key is set), "ADD key value" (set it unless it is set; answered
// with the value it then has) or "ONCLOSE key value" (ADD it when this
// connection ends: the client's process exited or was killed; at most
// maxOnClose per connection). Keys have at most MaxKeyLen bytes and no
// spaces, values at most MaxValueLen bytes and no newline; the limits
// hold while reading, so no request grows the server past them. A
// request over a limit, or malformed, is answered with an "ERR" line
// naming the limit and the connection is closed.
type StoreServer struct {
	ln      net.Listener
	secret  Secret
	timeout time.Duration // of a handshake
	mu      sync.Mutex
	kv      map[string]string
	cond    *sync.Cond
	done    bool
	quit    chan struct{}
	wg      sync.WaitGroup
	conn    map[net.Conn]bool
	pending chan struct{} // one token per connection in its handshake
	// peak is the largest request buffer a connection grew (for tests).
	peak atomic.Int64
}

// maxPendingAuth bounds the connections in their handshake at once.
const maxPendingAuth = 64

// ServeStore serves a store on ln until Close; connections must know
// secret (the zero Secret: any program can).
func ServeStore(ln net.Listener, secret Secret) *StoreServer {
	return serveStoreTimeout(ln, secret, DefaultHandshakeTimeout)
}

func serveStoreTimeout(ln net.Listener, secret Secret, timeout time.Duration) *StoreServer {
	s := &StoreServer{ln: ln, secret: secret, timeout: timeout, kv: map[string]string{}, conn: map[net.Conn]bool{},
		quit: make(chan struct{}), pending: make(chan struct{}, maxPendingAuth)}
	s.cond = sync.NewCond(&s.mu)
	s.wg.Add(1)
	go s.accept()
	return s
}

// Addr is the server's address.
func (s *StoreServer) Addr() string { return s.ln.Addr().String() }

func (s *StoreServer) accept() {
	defer s.wg.Done()
	for {
		select {
		case s.pending <- struct{}{}:
		case <-s.quit:
			return
		}
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conn[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

// handshake authenticates the client of c: nil when it knows the
// secret, else the error and the message to answer with ("" for none).
func (s *StoreServer) handshake(c net.Conn, r *bufio.Reader) (string, error) {
	_ = c.SetDeadline(time.Now().Add(s.timeout))
	defer c.SetDeadline(time.Time{})
	nonce, err := newNonce()
	if err != nil {
		return "", err
	}
	if _, err := c.Write([]byte(storeGreeting + hex.EncodeToString(nonce) + "\n")); err != nil {
		return "", err
	}
	line, err := readLine(r, maxHandshakeLine, nil)
	switch {
	case errors.Is(err, errTooLong):
		return "store: authentication failed: an answer of more than 256 bytes: want AUTH <nonce> <mac>", err
	case isTimeout(err):
		return "store: authentication failed: no answer to the challenge within " + s.timeout.String(), err
	case err != nil:
		return "", err
	}
	theirs, mac, ok := parseAuth(line)
	if !ok {
		return "store: authentication failed: want AUTH <nonce> <mac> (this is gorun's worker store)", errors.New("malformed answer")
	}
	if !verifyMAC(s.secret, mac, labelStoreClient, nonce, theirs) {
		return "store: authentication failed: wrong or missing " + JobSecretEnv, errors.New("wrong MAC")
	}
	_, err = c.Write([]byte("OK " + hex.EncodeToString(secretMAC(s.secret, labelStoreServer, nonce, theirs)) + "\n"))
	return "", err
}

// refuseLinger bounds how long a refused connection is drained after its
// error line, so that the line is not lost to a reset.
const refuseLinger = time.Second

// refuse answers c with one error line and ends it: it stops writing,
// then discards what the client still sends (nothing is buffered) for at
// most refuseLinger, so that the client can read the line.
func (s *StoreServer) refuse(c net.Conn, msg string) {
	_ = c.SetDeadline(time.Now().Add(refuseLinger))
	if _, err := c.Write([]byte("ERR " + msg + "\n")); err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	var sink [4096]byte
	for {
		if _, err := c.Read(sink[:]); err != nil {
			return
		}
	}
}

func (s *StoreServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conn, c)
		s.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReader(c)
	// The connection holds its token in s.pending until it is
	// authenticated, or refused and drained.
	msg, err := s.handshake(c, r)
	if err != nil && msg != "" {
		s.refuse(c, msg)
	}
	<-s.pending
	if err != nil {
		return
	}
	var buf []byte
	var onClose []request
	defer func() { s.closed(onClose) }()
	for {
		req, grown, err := readRequest(r, buf)
		buf = grown
		s.notePeak(int64(cap(buf)))
		var re *requestError
		if errors.As(err, &re) {
			s.refuse(c, re.msg)
			return
		}
		if err != nil {
			return
		}
		if req.verb == "ONCLOSE" {
			if len(onClose) == maxOnClose {
				s.refuse(c, fmt.Sprintf("store: ONCLOSE %s: this connection has %d already: the limit is %d", req.key, maxOnClose, maxOnClose))
				return
			}
			req.value = bytes.Clone(req.value) // buf is reused
			onClose = append(onClose, req)
		}
		reply, ok := s.do(req)
		if !ok {
			return
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// notePeak raises s.peak to n.
func (s *StoreServer) notePeak(n int64) {
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

// do runs one request; false: the server is closing.
func (s *StoreServer) do(req request) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch req.verb {
	case "SET":
		s.kv[req.key] = string(req.value)
		s.cond.Broadcast()
		return "OK\n", true
	case "ADD":
		return "VAL " + s.add(req) + "\n", true
	case "ONCLOSE":
		return "OK\n", true
	}
	v, ok := s.kv[req.key]
	for !ok && !s.done {
		s.cond.Wait()
		v, ok = s.kv[req.key]
	}
	return "VAL " + v + "\n", ok
}

// add sets req's key to its value unless it is set and returns the value
// it then has; s.mu is held.
func (s *StoreServer) add(req request) string {
	v, ok := s.kv[req.key]
	if !ok {
		v = string(req.value)
		s.kv[req.key] = v
		s.cond.Broadcast()
	}
	return v
}

// closed runs the ONCLOSE requests of a connection that ended, unless the
// server is closing (nobody is left to read them).
func (s *StoreServer) closed(onClose []request) {
	if len(onClose) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	for _, req := range onClose {
		s.add(req)
	}
}

// Close stops the server and ends every connection. It may be called
// more than once.
func (s *StoreServer) Close() {
	s.mu.Lock()
	if !s.done {
		close(s.quit)
	}
	s.done = true
	for c := range s.conn {
		c.Close()
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}
