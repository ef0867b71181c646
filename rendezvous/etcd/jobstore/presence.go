package jobstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The store's side of the nodes' presence (package etcd's presence.go
// has the node's side): each node of a job's store holds one more
// connection to the client port, negotiated as jobauth.PresenceProto,
// naming its lease; the port ends the lease once the last such connection
// of it was closed by the node (FIN or RST) and has been gone for
// PresenceGrace, as the node would have, had it left cleanly. A node cut
// off the network closes nothing (its connection times out, if ever):
// its lease ends with its TTL. A node that is alive reconnects to the
// same member within the grace (a reset connection), and keeps its
// lease.
//
// A presence claim needs the job's TLS, that is the token, whose holder
// may revoke any of the job's leases through etcd anyway.

// PresenceGrace is how long a lease outlives its last presence
// connection: a live node reconnects well within it.
const PresenceGrace = 500 * time.Millisecond

// revokeTimeout bounds one call of a revocation (the rendezvous's own
// revoke of a lease is bounded alike).
const revokeTimeout = 2 * time.Second

// presences is the client port's side: the presence connections open
// per lease, and the revocations they lead to.
type presences struct {
	socket, password string
	grace            time.Duration

	mu     sync.Mutex
	open   map[clientv3.LeaseID]int
	timers map[clientv3.LeaseID]*time.Timer
	cli    *clientv3.Client // logged in as rendezvous.EtcdUser over socket, made at the first revocation
	closed bool
	// life ends with close: it cancels a revocation in flight.
	life context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// PresenceOf says how many presence connections of lease id this member
// holds, and whether the lease's revocation is armed (its last connection
// closed by its node, the grace running); none and false for a store
// without the job's TLS. It lets the rendezvous's tests see a node's
// presence at each member.
func (s *Server) PresenceOf(id clientv3.LeaseID) (open int, revoking bool) {
	if s.port == nil || s.port.presence == nil {
		return 0, false
	}
	ps := s.port.presence
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.open[id], ps.timers[id] != nil
}

// newPresences serves presence connections for the store whose client
// socket is socket and whose job user's password is password.
func newPresences(socket, password string) *presences {
	life, stop := context.WithCancel(context.Background())
	return &presences{socket: socket, password: password, grace: PresenceGrace,
		open: map[clientv3.LeaseID]int{}, timers: map[clientv3.LeaseID]*time.Timer{}, life: life, stop: stop}
}

// hold serves one presence connection until it ends: a line "lease=ID",
// answered "ok", then nothing either way.
func (ps *presences) hold(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(handshakeDeadline))
	line, err := bufio.NewReader(io.LimitReader(c, 64)).ReadString('\n')
	if err != nil {
		return
	}
	id, err := parsePresence(line)
	if err != nil {
		_, _ = fmt.Fprintf(c, "error: %v\n", err)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if !ps.opened(id) {
		return
	}
	gone := false
	if _, err := c.Write([]byte("ok\n")); err == nil {
		var b [1]byte
		_, err = c.Read(b[:]) // the node sends nothing: this ends with the connection
		gone = peerClosed(err)
	}
	ps.closedOne(id, gone)
}

// peerClosed says whether a read's error is the peer's close (FIN or
// RST: its process ended, or it reconnects), not a timeout or a local
// close. Only that ends a lease: a network that fails between the node
// and this member (a store of several, reached through another) times
// out, and the node may well live on.
func peerClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// parsePresence reads a presence line's lease.
func parsePresence(line string) (clientv3.LeaseID, error) {
	v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "lease=")
	if !ok {
		return 0, errors.New("want lease=ID")
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("bad lease %q", v)
	}
	return clientv3.LeaseID(id), nil
}

// opened counts a presence connection of id; false once closed.
func (ps *presences) opened(id clientv3.LeaseID) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return false
	}
	ps.open[id]++
	if t := ps.timers[id]; t != nil && t.Stop() {
		delete(ps.timers, id)
		ps.wg.Done() // the stopped revocation will not run
	}
	return true
}

// closedOne forgets a presence connection of id; the last one, closed by
// the node (gone), arms the lease's revocation.
func (ps *presences) closedOne(id clientv3.LeaseID, gone bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.open[id]--; ps.open[id] > 0 {
		return
	}
	delete(ps.open, id)
	if !gone || ps.closed || ps.timers[id] != nil {
		return
	}
	ps.wg.Add(1)
	ps.timers[id] = time.AfterFunc(ps.grace, func() {
		defer ps.wg.Done()
		ps.mu.Lock()
		delete(ps.timers, id)
		back := ps.open[id] > 0 // came back as the timer fired
		ps.mu.Unlock()
		if !back {
			ps.revoke(id)
		}
	})
}

// revokeFor bounds the tries of a revocation: a store of several members
// that lost its leader with the node (the node hosted it) has none until
// the others elect one, which a loaded machine can take seconds to do.
const revokeFor = 15 * time.Second

// revoke ends lease id, as its node would have on its way out, trying
// again while the store cannot (no leader yet) for up to revokeFor.
func (ps *presences) revoke(id clientv3.LeaseID) {
	cli, err := ps.client()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ps.life, revokeFor)
	defer cancel()
	for ctx.Err() == nil {
		tctx, tcancel := context.WithTimeout(ctx, revokeTimeout)
		_, err := cli.Revoke(tctx, id)
		tcancel()
		if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return // a lease already gone is what was wanted
		}
	}
}

// client is the store's own client for revocations, logged in as the
// job's user over the store's socket.
func (ps *presences) client() (*clientv3.Client, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return nil, context.Canceled
	}
	if ps.cli == nil {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + ps.socket}, Username: rendezvous.EtcdUser, Password: ps.password,
			DialTimeout: dialTimeout, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		ps.cli = cli
	}
	return ps.cli, nil
}

// close stops the revocations not yet begun, waits for those in flight
// and closes the client. The connections are the port's to close.
func (ps *presences) close() {
	ps.mu.Lock()
	ps.closed = true
	for id, t := range ps.timers {
		if t.Stop() {
			ps.wg.Done()
		}
		delete(ps.timers, id)
	}
	ps.mu.Unlock()
	ps.stop()
	ps.wg.Wait()
	if ps.cli != nil {
		ps.cli.Close()
	}
}
