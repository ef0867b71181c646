package comm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// Store is where ranks meet: Set publishes a value, Get waits until the
// key is set.
type Store interface {
	Set(ctx context.Context, key, value string) error
	Get(ctx context.Context, key string) (string, error)
}

// StoreServer is a tiny store served over TCP by rank 0 (as PyTorch's
// TCPStore is): one line per request, "SET key value", "GET key" (answered
// once the key is set) or "ADD key value" (set it unless it is set;
// answered with the value it then has).
type StoreServer struct {
	ln   net.Listener
	mu   sync.Mutex
	kv   map[string]string
	cond *sync.Cond
	done bool
	wg   sync.WaitGroup
	conn map[net.Conn]bool
}

// ServeStore serves a store on ln until Close.
func ServeStore(ln net.Listener) *StoreServer {
	s := &StoreServer{ln: ln, kv: map[string]string{}, conn: map[net.Conn]bool{}}
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

func (s *StoreServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conn, c)
		s.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		verb, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		var reply string
		switch verb {
		case "SET":
			k, v, _ := strings.Cut(rest, " ")
			s.mu.Lock()
			s.kv[k] = v
			s.cond.Broadcast()
			s.mu.Unlock()
			reply = "OK\n"
		case "ADD":
			k, v, _ := strings.Cut(rest, " ")
			s.mu.Lock()
			if cur, ok := s.kv[k]; ok {
				v = cur
			} else {
				s.kv[k] = v
				s.cond.Broadcast()
			}
			s.mu.Unlock()
			reply = "VAL " + v + "\n"
		case "GET":
			s.mu.Lock()
			v, ok := s.kv[rest]
			for !ok && !s.done {
				s.cond.Wait()
				v, ok = s.kv[rest]
			}
			s.mu.Unlock()
			if !ok {
				return
			}
			reply = "VAL " + v + "\n"
		default:
			reply = "ERR unknown request\n"
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// Close stops the server and ends every connection.
func (s *StoreServer) Close() {
	s.mu.Lock()
	s.done = true
	for c := range s.conn {
		c.Close()
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}

// StoreClient talks to a StoreServer. It is safe for concurrent use (one
// request at a time).
type StoreClient struct {
	mu sync.Mutex
	c  net.Conn
	r  *bufio.Reader
}

// DialStore connects to the store at addr, retrying until ctx ends: rank
// 0 may start after the others.
func DialStore(ctx context.Context, addr string) (*StoreClient, error) {
	var d net.Dialer
	delay := 10 * time.Millisecond
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return &StoreClient{c: c, r: bufio.NewReader(c)}, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("store at %s (rank 0, MASTER_ADDR:MASTER_PORT): %w (last: %v)", addr, ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// LocalAddr is this end's address: one the other ranks can reach.
func (c *StoreClient) LocalAddr() net.Addr { return c.c.LocalAddr() }

func (c *StoreClient) roundTrip(ctx context.Context, req string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.c.SetDeadline(dl)
	} else {
		_ = c.c.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := c.c.Write([]byte(req)); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", err
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// Set implements Store.
func (c *StoreClient) Set(ctx context.Context, key, value string) error {
	if strings.ContainsAny(key, " \n") || strings.Contains(value, "\n") {
		return fmt.Errorf("store: key %q / value %q: no spaces in keys, no newlines", key, value)
	}
	reply, err := c.roundTrip(ctx, "SET "+key+" "+value+"\n")
	if err == nil && reply != "OK" {
		err = errors.New("store: " + reply)
	}
	return err
}

// Create sets key to value unless it is set, and returns the value the
// key then has: value if this call set it, else the first one.
func (c *StoreClient) Create(ctx context.Context, key, value string) (string, error) {
	if strings.ContainsAny(key, " \n") || strings.Contains(value, "\n") {
		return "", fmt.Errorf("store: key %q / value %q: no spaces in keys, no newlines", key, value)
	}
	reply, err := c.roundTrip(ctx, "ADD "+key+" "+value+"\n")
	if err != nil {
		return "", fmt.Errorf("store: create %s: %w", key, err)
	}
	v, ok := strings.CutPrefix(reply, "VAL ")
	if !ok {
		return "", errors.New("store: " + reply)
	}
	return v, nil
}

// Get implements Store.
func (c *StoreClient) Get(ctx context.Context, key string) (string, error) {
	reply, err := c.roundTrip(ctx, "GET "+key+"\n")
	if err != nil {
		return "", fmt.Errorf("store: get %s: %w", key, err)
	}
	v, ok := strings.CutPrefix(reply, "VAL ")
	if !ok {
		return "", errors.New("store: " + reply)
	}
	return v, nil
}

// Close ends the connection.
func (c *StoreClient) Close() error { return c.c.Close() }
