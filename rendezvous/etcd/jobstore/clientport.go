package jobstore

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
)

// clientPort is the embedded store's client port. etcd serves its clients
// on a Unix socket in a private folder; the port is bound when the store
// starts (so a taken port is an error at once) and forwards connections
// to the socket only once open is called: after authentication is on, so
// that no client ever reaches a store without it.
//
// With the job's TLS (a store with a token, jobauth.ServerTLS) the port
// ends the TLS itself: a connection is pending until its handshake proves
// the client holds the token, and only then is it served, by etcd's gRPC
// services in this process (grpcport.go). Pending connections are capped
// (in all, and per source address, the oldest closed first) and must
// prove themselves within a deadline, so a flood of idle connections
// costs one descriptor each, and a bounded number of them. A proven
// connection that negotiated jobauth.PresenceProto is held, not served:
// the node's presence (presence.go). Without the job's TLS (the user's own, which is etcd's
// end to end, or none), bytes are forwarded as they are.
type clientPort struct {
	ln     net.Listener
	socket string
	tls    *tls.Config
	limits pendingLimits
	// presence serves the presence connections; nil without the job's TLS.
	presence *presences
	// grpc serves the proven connections, in place of the socket; nil
	// without the job's TLS.
	grpc *grpcPort

	mu    sync.Mutex
	conns map[net.Conn]bool
	// pending are the connections whose handshake is not done, by source
	// address, oldest first; npending counts them.
	pending  map[string][]net.Conn
	npending int
	closed   bool
	wg       sync.WaitGroup
	// done is closed by close: it ends a back-off of the accept loop.
	done chan struct{}
}

// pendingLimits bound the connections that have not proved themselves.
type pendingLimits struct {
	total, perSource int
	deadline         time.Duration
}

// defaultPendingLimits are for a store whose process may hold files
// descriptors: a quarter of them for pending connections (a job's
// agents each hold one pending connection for a handshake's time; a
// flood holds the rest), at most a quarter of those from one address.
func defaultPendingLimits(files uint64) pendingLimits {
	total := int(min(max(files/4, 64), 4096))
	return pendingLimits{total: total, perSource: max(total/4, 16), deadline: handshakeDeadline}
}

// handshakeDeadline is how long a connection may take to prove itself.
const handshakeDeadline = 10 * time.Second

// bindClientPort binds addr for the store whose socket is at socket;
// tlsCfg, when set, is the job's TLS the port ends.
func bindClientPort(addr, socket string, tlsCfg *tls.Config, limits pendingLimits) (*clientPort, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := newClientPort(ln, socket)
	p.tls, p.limits = tlsCfg, limits
	return p, nil
}

func newClientPort(ln net.Listener, socket string) *clientPort {
	return &clientPort{ln: ln, socket: socket, conns: map[net.Conn]bool{}, pending: map[string][]net.Conn{},
		limits: defaultPendingLimits(1024), done: make(chan struct{})}
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
			if !ctxtime.SleepUnless(p.done, delay) {
				return
			}
			continue
		}
		delay = 0
		if !p.track(c, p.tls != nil) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// source is the address a connection comes from, without its port.
func source(c net.Conn) string {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// track records c for close, as pending when it must prove itself
// (closing the oldest pending connection of its source, or of the
// largest source, when a cap is reached); false once the port is closed.
func (p *clientPort) track(c net.Conn, pending bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = true
	if !pending {
		return true
	}
	src := source(c)
	if len(p.pending[src]) >= p.limits.perSource {
		p.evictLocked(src)
	} else if p.npending >= p.limits.total {
		largest := src
		for s, cs := range p.pending {
			if len(cs) > len(p.pending[largest]) {
				largest = s
			}
		}
		p.evictLocked(largest)
	}
	p.pending[src] = append(p.pending[src], c)
	p.npending++
	return true
}

// evictLocked closes the oldest pending connection of src; its handshake
// fails and its goroutine ends.
func (p *clientPort) evictLocked(src string) {
	cs := p.pending[src]
	if len(cs) == 0 {
		return
	}
	cs[0].Close()
	delete(p.conns, cs[0])
	p.unpendLocked(src, cs[0])
}

// unpendLocked drops c from the pending connections of src.
func (p *clientPort) unpendLocked(src string, c net.Conn) {
	cs := p.pending[src]
	for i, pc := range cs {
		if pc == c {
			cs = append(cs[:i:i], cs[i+1:]...)
			p.npending--
			break
		}
	}
	if len(cs) == 0 {
		delete(p.pending, src)
	} else {
		p.pending[src] = cs
	}
}

// untrack forgets c and closes it.
func (p *clientPort) untrack(c net.Conn) {
	p.forget(c)
	c.Close()
}

// forget drops c from the connections the port closes.
func (p *clientPort) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.unpendLocked(source(c), c)
	p.mu.Unlock()
}

// prove runs the job's TLS handshake on c within the deadline; the
// connection is then no longer pending.
func (p *clientPort) prove(c net.Conn) (net.Conn, bool) {
	_ = c.SetDeadline(time.Now().Add(p.limits.deadline))
	tc := tls.Server(c, p.tls)
	// An eviction or the port's close closes c, which ends the handshake.
	if err := tc.Handshake(); err != nil {
		return nil, false
	}
	_ = c.SetDeadline(time.Time{})
	p.mu.Lock()
	p.unpendLocked(source(c), c)
	closed := p.closed
	p.mu.Unlock()
	return tc, !closed
}

// forward serves c: with the job's TLS, once proven, it hands c to the
// gRPC port (or holds it as a presence); otherwise it copies between c
// and the store's socket until either side ends, then closes both.
func (p *clientPort) forward(c net.Conn) {
	defer p.wg.Done()
	handed := false
	defer func() {
		if !handed {
			p.untrack(c)
		}
	}()
	client := c
	if p.tls != nil {
		var ok bool
		if client, ok = p.prove(c); !ok {
			return
		}
		if client.(*tls.Conn).ConnectionState().NegotiatedProtocol == jobauth.PresenceProto {
			if p.presence != nil {
				p.presence.hold(client)
			}
			return
		}
		if p.grpc != nil {
			// The gRPC server owns the connection from here, and closes
			// it (at the latest when the port closes: grpcPort.stop).
			p.forget(c)
			handed = true
			if !p.grpc.serve(client) {
				client.Close()
			}
			return
		}
	}
	s, err := net.Dial("unix", p.socket)
	if err != nil {
		return
	}
	if !p.track(s, false) {
		s.Close()
		return
	}
	defer p.untrack(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(s, client)
		s.Close()
	}()
	_, _ = io.Copy(client, s)
	c.Close()
	<-done
}

// close stops accepting, closes every forwarded connection and waits for
// the forwarding goroutines.
func (p *clientPort) close() {
	if p.presence != nil {
		// First: the connections closed below must not lead to revocations.
		p.presence.close()
	}
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
	if p.grpc != nil {
		p.grpc.stop()
	}
}
