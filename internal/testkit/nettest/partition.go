// Package nettest has network helpers for tests: a TCP proxy that can cut
// the network between its clients and its target the way a partition
// does, without closing anything.
package nettest

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target. Cut stops every byte in both
// directions, on open connections and new ones, until Heal: connections
// stay open and calls hang, as when a switch or a route fails (nothing is
// refused or reset). Bytes held while cut are delivered after Heal.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	cut   bool
	done  bool
	conns map[net.Conn]bool
	// failedDials counts connections whose target refused them.
	failedDials int
	wg          sync.WaitGroup
}

// NewProxy listens on a free port of 127.0.0.1 and forwards to target; the
// proxy closes when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut partitions the proxy's clients from the target.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
}

// Heal ends the partition.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
	p.cond.Broadcast()
}

// Reset closes every open connection through the proxy, as a reset
// from the network would; new ones are forwarded as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// FailedDials is the number of client connections that the target
// refused: a client tried to reach it while it was down.
func (p *Proxy) FailedDials() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failedDials
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.done = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.cond.Broadcast()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

// track records c so that Close closes it; false if the proxy closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

// pass waits while the network is cut; false once the proxy closed.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.cut && !p.done {
		p.cond.Wait()
	}
	return !p.done
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) || !p.pass() {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		p.mu.Lock()
		p.failedDials++
		p.mu.Unlock()
		client.Close()
		return
	}
	if !p.track(server) {
		client.Close()
		return
	}
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); p.copy(server, client) }()
	go func() { defer both.Done(); p.copy(client, server) }()
	both.Wait()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

// copy forwards src to dst, holding each chunk while the network is cut.
func (p *Proxy) copy(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: close both sides
		}
	}
}
