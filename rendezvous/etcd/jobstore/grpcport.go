package jobstore

import (
	"net"
	"sync"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// grpcPort serves the connections the client port has proven (the job's
// TLS, ended by the port) with etcd's own gRPC services, in this process:
// a proven connection costs the store one descriptor and no copying,
// where forwarding it to etcd's socket cost three descriptors and two
// more reads and writes of every message. The job's agents speak gRPC
// only (the job's TLS offers "h2" and the presence protocol), so etcd's
// HTTP gateway, which the socket also serves, is not offered here.
type grpcPort struct {
	srv   *grpc.Server
	queue *connQueue
	done  chan struct{} // closed when Serve returned

	// conns are the connections handed to the server and not closed yet:
	// stop closes them, for gRPC's Stop waits for, without closing, one
	// that has not sent its HTTP/2 preface.
	mu     sync.Mutex
	conns  map[*servedConn]bool
	closed bool
}

// servedConn is a connection handed to the server; its Close forgets it.
type servedConn struct {
	net.Conn
	port *grpcPort
	once sync.Once
}

func (c *servedConn) Close() error {
	c.once.Do(func() {
		c.port.mu.Lock()
		delete(c.port.conns, c)
		c.port.mu.Unlock()
	})
	return c.Conn.Close()
}

// startGRPCPort serves e's gRPC services on proven connections handed to
// serve, with the keep-alive rules e gives its own client listeners.
func startGRPCPort(e *embed.Etcd) *grpcPort {
	cfg := e.Config()
	var opts []grpc.ServerOption
	if cfg.GRPCKeepAliveMinTime > 0 {
		opts = append(opts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.GRPCKeepAliveMinTime}))
	}
	if cfg.GRPCKeepAliveInterval > 0 && cfg.GRPCKeepAliveTimeout > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.GRPCKeepAliveInterval, Timeout: cfg.GRPCKeepAliveTimeout}))
	}
	// A proven client sends its preface at once: one that does not is
	// closed as a pending one would be (gRPC's default waits 120 s).
	opts = append(opts, grpc.ConnectionTimeout(handshakeDeadline))
	p := &grpcPort{srv: v3rpc.Server(e.Server, nil, nil, opts...), queue: newConnQueue(), done: make(chan struct{}), conns: map[*servedConn]bool{}}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(p.queue)
	}()
	return p
}

// serve hands c to the gRPC server; false once the port is stopped (c is
// then the caller's to close).
func (p *grpcPort) serve(c net.Conn) bool {
	sc := &servedConn{Conn: c, port: p}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.conns[sc] = true
	p.mu.Unlock()
	if !p.queue.put(sc) {
		p.forget(sc)
		return false
	}
	return true
}

func (p *grpcPort) forget(c *servedConn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// stop closes every connection the port serves and waits for it to end.
func (p *grpcPort) stop() {
	p.queue.Close()
	p.mu.Lock()
	p.closed = true
	conns := make([]*servedConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.Conn.Close()
	}
	p.srv.Stop()
	<-p.done
}

// connQueue is a net.Listener whose connections are handed to it.
type connQueue struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnQueue() *connQueue {
	return &connQueue{conns: make(chan net.Conn), done: make(chan struct{})}
}

// put waits until Accept takes c or the queue is closed (false).
func (q *connQueue) put(c net.Conn) bool {
	select {
	case q.conns <- c:
		return true
	case <-q.done:
		return false
	}
}

// Accept returns the next connection handed to the queue.
func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

// Close ends Accept and put.
func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

// Addr is the queue's address (it has none of its own).
func (q *connQueue) Addr() net.Addr { return queueAddr{} }

type queueAddr struct{}

func (queueAddr) Network() string { return "proven" }
func (queueAddr) String() string  { return "proven connections of the client port" }
