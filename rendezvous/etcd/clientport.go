package etcd

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// clientPort is the embedded store's client port. etcd serves its clients
// on a Unix socket in a private folder; the port is bound when the store
// starts (so a taken port is an error at once) and forwards connections
// to the socket only once open is called: after authentication is on, so
// that no client ever reaches a store without it. Bytes are forwarded as
// they are: TLS, when the store has it, is etcd's own, end to end.
type clientPort struct {
	ln     net.Listener
	socket string

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
	// done is closed by close: it ends a back-off of the accept loop.
	done chan struct{}
}

// bindClientPort binds addr for the store whose socket is at socket.
func bindClientPort(addr, socket string) (*clientPort, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return newClientPort(ln, socket), nil
}

func newClientPort(ln net.Listener, socket string) *clientPort {
	return &clientPort{ln: ln, socket: socket, conns: map[net.Conn]bool{}, done: make(chan struct{})}
}

// addr is the bound address.
func (p *clientPort) addr() string { return p.ln.Addr().String() }

// open starts forwarding. Connections made before wait in the listen
// queue.
func (p *clientPort) open() {
	p.wg.Add(1)
	go p.accept()
}

// Back-off of the accept loop after an error other than the close (out
// of descriptors: EMFILE), as net/http's: the port keeps accepting once
// descriptors are free again.
const (
	acceptMinDelay = 5 * time.Millisecond
	acceptMaxDelay = time.Second
)

func (p *clientPort) accept() {
	defer p.wg.Done()
	var delay time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			delay = min(max(2*delay, acceptMinDelay), acceptMaxDelay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
				continue
			case <-p.done:
				t.Stop()
				return
			}
		}
		delay = 0
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// track records c for close; false once the port is closed.
func (p *clientPort) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *clientPort) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// forward copies between a client and the store's socket until either
// side ends; then both connections are closed.
func (p *clientPort) forward(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	s, err := net.Dial("unix", p.socket)
	if err != nil {
		return
	}
	if !p.track(s) {
		s.Close()
		return
	}
	defer p.untrack(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(s, c)
		s.Close()
	}()
	_, _ = io.Copy(c, s)
	c.Close()
	<-done
}

// close stops accepting, closes every forwarded connection and waits for
// the forwarding goroutines.
func (p *clientPort) close() {
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
