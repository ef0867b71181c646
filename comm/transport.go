package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// peer is the connection to one other rank, with the message counters of
// each direction: every message carries its number and length, so two
// ranks that disagree on what comes next get an error, not garbage.
type peer struct {
	rank       int
	conn       net.Conn
	shm        *shmLink // set when the peer shares this host's memory
	sent, recv uint64
	hdrOut     [16]byte
	hdrIn      [16]byte
}

// mesh connects every pair of ranks once over TCP.
type mesh struct {
	rank, size int
	cfg        meshConfig
	peers      []*peer // by rank; nil for this rank
	watchers   sync.WaitGroup
	// closed: this rank shut the mesh down (its errors say so, not that
	// a peer went).
	closed atomic.Bool
}

// connectMesh publishes this rank's listening address in the store under
// cfg.prefix, dials every lower rank and accepts every higher one, each
// connection authenticated with cfg.secret (meshauth.go).
func connectMesh(ctx context.Context, st Store, cfg meshConfig) (*mesh, error) {
	rank, size := cfg.rank, cfg.size
	m := &mesh{rank: rank, size: size, cfg: cfg, peers: make([]*peer, size)}
	if size == 1 {
		return m, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.host, "0"))
	if err != nil {
		return nil, fmt.Errorf("rank %d: listen on %s: %w", rank, cfg.host, err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	if err := st.Set(ctx, cfg.prefix+"addr/"+strconv.Itoa(rank), addr); err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	// Accept the higher ranks; each proves who it is.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := m.acceptPeers(ctx, ln, addr); err != nil {
			fail(err)
		}
	}()
	for r := range rank {
		addr, err := st.Get(ctx, cfg.prefix+"addr/"+strconv.Itoa(r))
		if err != nil {
			fail(err)
			break
		}
		c, err := cfg.dialPeer(ctx, r, addr)
		if err != nil {
			fail(err)
			break
		}
		m.peers[r] = &peer{rank: r, conn: tune(c)}
	}
	mu.Lock()
	if len(errs) > 0 {
		ln.Close() // a failed dial: stop waiting for the higher ranks
	}
	mu.Unlock()
	wg.Wait()
	if len(errs) > 0 {
		m.close()
		return nil, errors.Join(errs...)
	}
	return m, nil
}

// tune sets the socket options for bulk transfers.
func tune(c net.Conn) net.Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetReadBuffer(4 << 20)
		_ = tc.SetWriteBuffer(4 << 20)
	}
	return c
}

func (m *mesh) close() {
	m.closed.Store(true)
	for _, p := range m.peers {
		if p != nil && p.shm != nil {
			p.shm.closed.Store(true)
		}
	}
	for _, p := range m.peers {
		if p != nil {
			p.conn.Close()
		}
	}
	m.watchers.Wait()
}

// unmapShm releases the shared memory; no operation may use the mesh any
// more.
func (m *mesh) unmapShm() {
	for _, p := range m.peers {
		if p != nil && p.shm != nil {
			p.shm.close()
		}
	}
}

// send writes one message to rank r before deadline.
func (m *mesh) send(r int, b []byte, deadline time.Time) error {
	p := m.peers[r]
	if p.shm == nil {
		_ = p.conn.SetWriteDeadline(deadline)
	}
	binary.LittleEndian.PutUint64(p.hdrOut[:8], p.sent)
	binary.LittleEndian.PutUint64(p.hdrOut[8:], uint64(len(b)))
	p.sent++
	if p.shm != nil {
		if err := p.shm.write(p.hdrOut[:], deadline); err != nil {
			return fmt.Errorf("rank %d: send to rank %d: %w", m.rank, r, err)
		}
		if err := p.shm.write(b, deadline); err != nil {
			return fmt.Errorf("rank %d: send to rank %d: %w", m.rank, r, err)
		}
		return nil
	}
	if _, err := p.conn.Write(p.hdrOut[:]); err != nil {
		return m.peerErr(r, "send to", err)
	}
	if _, err := p.conn.Write(b); err != nil {
		return m.peerErr(r, "send to", err)
	}
	return nil
}

// readFull reads len(b) bytes from the peer's link.
func (m *mesh) readFull(p *peer, b []byte, deadline time.Time) error {
	if p.shm != nil {
		if err := p.shm.read(b, deadline); err != nil {
			return fmt.Errorf("rank %d: receive from rank %d: %w", m.rank, p.rank, err)
		}
		return nil
	}
	if _, err := io.ReadFull(p.conn, b); err != nil {
		return m.peerErr(p.rank, "receive from", err)
	}
	return nil
}

// recv reads the next message from rank r into b, which must be its size.
func (m *mesh) recv(r int, b []byte, deadline time.Time) error {
	p := m.peers[r]
	if p.shm == nil {
		_ = p.conn.SetReadDeadline(deadline)
	}
	if err := m.readFull(p, p.hdrIn[:], deadline); err != nil {
		return err
	}
	seq, n := binary.LittleEndian.Uint64(p.hdrIn[:8]), binary.LittleEndian.Uint64(p.hdrIn[8:])
	if seq != p.recv || n != uint64(len(b)) {
		return fmt.Errorf("rank %d: message %d of %d bytes from rank %d, expected message %d of %d bytes: the ranks called different collectives (desync)",
			m.rank, seq, n, r, p.recv, len(b))
	}
	p.recv++
	return m.readFull(p, b, deadline)
}

// peerErr says what an error on the connection to rank r means: this
// rank shut the mesh down, the peer closed its connection (it was
// stopped, or it exited), or it timed out.
func (m *mesh) peerErr(r int, what string, err error) error {
	switch {
	case m.closed.Load():
		return fmt.Errorf("rank %d: %s rank %d: the connection was closed on this side (the group was shut down): %w", m.rank, what, r, err)
	case isTimeout(err):
		return fmt.Errorf("rank %d: %s rank %d: timed out (the peer is stuck or gone): %w", m.rank, what, r, err)
	}
	return fmt.Errorf("rank %d: %s rank %d: rank %d closed its connection (it was stopped, or it exited): %w", m.rank, what, r, r, err)
}
