package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The mesh's handshake, on each connection a higher rank dials to a
// lower one's listener (docs/comm.md):
//
//	listener -> dialer: meshMagic, nonce L (32 bytes)
//	dialer -> listener: its rank (uint32), nonce D (32), MAC (32)
//	listener -> dialer: MAC' (32), once the claim holds
//
// MAC and MAC' are HMAC-SHA256 under the job's secret of their own
// label, the group's store prefix, the listener's address as published
// in this round's store, both ranks and both nonces: the secret never
// crosses the wire, an answer is good for one connection of one pair of
// one group of one round (the listener's nonce is new each time), and a
// dialer believes only a listener that proved it knows the secret too.
const meshMagic = "GRM1"

// maxPendingMesh bounds the connections in their handshake at once on a
// mesh listener; more wait in its backlog.
const maxPendingMesh = 16

// maxRefusalLogs bounds the lines a listener logs about refused
// connections.
const maxRefusalLogs = 20

// meshConfig is what connectMesh needs.
type meshConfig struct {
	prefix     string // the group's keys in the store
	rank, size int
	host       string
	secret     Secret
	log        io.Writer
	timeout    time.Duration // of one handshake (0: DefaultHandshakeTimeout)
}

func (cfg meshConfig) handshakeTimeout() time.Duration {
	if cfg.timeout > 0 {
		return cfg.timeout
	}
	return DefaultHandshakeTimeout
}

// meshMAC is the MAC of a handshake's message label between dialer from
// and listener to at addr.
func (cfg meshConfig) meshMAC(label, addr string, from, to int, nl, nd []byte) []byte {
	return secretMAC(cfg.secret, label, []byte(cfg.prefix), []byte(addr), u32(from), u32(to), nl, nd)
}

// dialPeer connects this rank to the listener of lower rank to at addr
// and runs the dialer's side of the handshake.
func (cfg meshConfig) dialPeer(ctx context.Context, to int, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rank %d: connect to rank %d at %s: %w", cfg.rank, to, addr, err)
	}
	_ = c.SetDeadline(time.Now().Add(cfg.handshakeTimeout()))
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	fail := func(what string, err error) (net.Conn, error) {
		c.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("rank %d: connect to rank %d at %s: %s: %w", cfg.rank, to, addr, what, err)
	}
	hello := make([]byte, len(meshMagic)+nonceLen)
	if _, err := io.ReadFull(c, hello); err != nil {
		return fail("no challenge", err)
	}
	if string(hello[:len(meshMagic)]) != meshMagic {
		return fail("handshake", errors.New("the listener does not speak gorun's mesh protocol"))
	}
	nl := hello[len(meshMagic):]
	nd, err := newNonce()
	if err != nil {
		return fail("handshake", err)
	}
	claim := binary.LittleEndian.AppendUint32(nil, uint32(cfg.rank))
	claim = append(append(claim, nd...), cfg.meshMAC(labelMeshDial, addr, cfg.rank, to, nl, nd)...)
	if _, err := c.Write(claim); err != nil {
		return fail("handshake", err)
	}
	proof := make([]byte, 32)
	if _, err := io.ReadFull(c, proof); err != nil {
		return fail("the handshake was refused (does every rank have the same "+JobSecretEnv+"?)", err)
	}
	if !verifyMAC(cfg.secret, proof, labelMeshAccept, []byte(cfg.prefix), []byte(addr), u32(cfg.rank), u32(to), nl, nd) {
		return fail("handshake", errors.New("the listener did not prove it knows "+JobSecretEnv+" (a stranger at a published address?)"))
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// acceptPeers accepts the connections of every higher rank on ln (at
// addr, as published), each authenticated before its claimed rank is
// believed. A connection that fails (garbage, a wrong MAC, a rank out of
// range or already connected, silence past the handshake timeout) is
// logged with its remote address and closed, and the listener goes on:
// the real peer can still connect. It returns when every higher rank is
// connected, or with ctx's error.
func (m *mesh) acceptPeers(ctx context.Context, ln net.Listener, addr string) error {
	need := m.size - 1 - m.rank
	if need == 0 {
		return nil
	}
	actx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(actx, func() { ln.Close() })
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		joined int
		logged int
	)
	refused := func(c net.Conn, why error) {
		mu.Lock()
		defer mu.Unlock()
		c.Close()
		if actx.Err() != nil {
			return // the mesh is complete or given up: not a stranger
		}
		switch logged++; {
		case logged <= maxRefusalLogs:
			fmt.Fprintf(m.cfg.log, "comm: rank %d: refused a mesh connection from %s: %v\n", m.rank, c.RemoteAddr(), why)
		case logged == maxRefusalLogs+1:
			fmt.Fprintf(m.cfg.log, "comm: rank %d: more mesh connections refused; no more are logged\n", m.rank)
		}
	}
	sem := make(chan struct{}, maxPendingMesh)
	var acceptErr error
	for {
		select {
		case sem <- struct{}{}:
		case <-actx.Done():
		}
		if actx.Err() != nil {
			break
		}
		c, err := ln.Accept()
		if err != nil {
			<-sem
			if actx.Err() == nil {
				acceptErr = err
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r, proof, err := m.challenge(actx, c, addr)
			if err != nil {
				refused(c, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if m.peers[r] != nil {
				c.Close()
				if actx.Err() == nil {
					fmt.Fprintf(m.cfg.log, "comm: rank %d: refused a mesh connection from %s: rank %d is already connected\n", m.rank, c.RemoteAddr(), r)
				}
				return
			}
			_ = c.SetWriteDeadline(time.Now().Add(m.cfg.handshakeTimeout()))
			if _, err := c.Write(proof); err != nil || actx.Err() != nil {
				c.Close()
				return
			}
			_ = c.SetDeadline(time.Time{})
			m.peers[r] = &peer{rank: r, conn: tune(c)}
			if joined++; joined == need {
				cancel()
			}
		}()
	}
	cancel()
	stop()
	wg.Wait()
	if joined == need {
		return nil
	}
	if acceptErr != nil {
		return fmt.Errorf("rank %d: accept: %w", m.rank, acceptErr)
	}
	return fmt.Errorf("rank %d: waiting for %d higher rank(s) to connect: %w", m.rank, need-joined, ctx.Err())
}

// challenge runs the listener's side of the handshake on c up to the
// proof, and returns the rank c proved it is and the proof to send it.
func (m *mesh) challenge(ctx context.Context, c net.Conn, addr string) (int, []byte, error) {
	_ = c.SetDeadline(time.Now().Add(m.cfg.handshakeTimeout()))
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	nl, err := newNonce()
	if err != nil {
		return 0, nil, err
	}
	if _, err := c.Write(append([]byte(meshMagic), nl...)); err != nil {
		return 0, nil, fmt.Errorf("handshake: %w", err)
	}
	claim := make([]byte, 4+nonceLen+32)
	if _, err := io.ReadFull(c, claim); err != nil {
		if isTimeout(err) {
			return 0, nil, fmt.Errorf("no answer to the challenge within %v", m.cfg.handshakeTimeout())
		}
		return 0, nil, fmt.Errorf("no answer to the challenge: %w", err)
	}
	r := int(binary.LittleEndian.Uint32(claim[:4]))
	nd, mac := claim[4:4+nonceLen], claim[4+nonceLen:]
	// The MAC covers the claimed rank: check it before believing it.
	if !verifyMAC(m.cfg.secret, mac, labelMeshDial, []byte(m.cfg.prefix), []byte(addr), u32(r), u32(m.rank), nl, nd) {
		return 0, nil, fmt.Errorf("it claims rank %d without proving it knows %s (wrong or missing secret, or not a gorun rank)", r, JobSecretEnv)
	}
	if r <= m.rank || r >= m.size {
		return 0, nil, fmt.Errorf("it claims rank %d: want a rank above %d and below %d (the world size)", r, m.rank, m.size)
	}
	return r, m.cfg.meshMAC(labelMeshAccept, addr, r, m.rank, nl, nd), nil
}
