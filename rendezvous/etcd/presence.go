package etcd

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
)

// Presence: a node killed outright (SIGKILL, the OOM killer, a crash)
// cannot renew its lease, but the store would otherwise learn of it only
// when the lease ends, a whole TTL later. Its kernel closes its sockets
// at once, though. So each node of a job's store (one reached over the
// job's TLS, whose client port gorun runs) holds one more connection to
// the client port, negotiated as jobauth.PresenceProto, naming its lease;
// the port (package jobstore's presence.go) ends the lease once the last
// such connection of it was closed by the node (FIN or RST) and has been
// gone for jobstore.PresenceGrace, as the node would have, had it left
// cleanly. A node cut off the network closes nothing (its connection
// times out, if ever): its lease ends with its TTL, as before. A node
// that is alive reconnects to the same member within the grace (a reset
// connection), and keeps its lease. This file is the node's side.
//
// A presence claim needs the job's TLS, that is the token, whose holder
// may revoke any of the job's leases through etcd anyway.

// presenceRetry bounds the node's reconnection back-off.
const (
	presenceMinDelay = 20 * time.Millisecond
	presenceMaxDelay = 2 * time.Second
)

// presenceTLS is the job's client TLS, negotiating jobauth.PresenceProto.
func presenceTLS(token Token) (*tls.Config, error) {
	cfg, err := jobauth.ClientTLS(token)
	if err != nil {
		return nil, err
	}
	cfg.NextProtos = []string{jobauth.PresenceProto}
	return cfg, nil
}

// holdPresence keeps a presence connection for lease id at one of
// endpoints (read at each try: a store that grew has more) until ctx
// ends. When it breaks, it reconnects at once to the
// same endpoint, whose member counts the grace (another member's count is
// its own), and moves to the next only when that one cannot be reached.
// A store that does not serve presence (an older gorun's) or refuses the
// claim makes it give up, saying so in log: the lease then ends with its
// TTL.
func holdPresence(ctx context.Context, endpoints func() []string, tlsCfg *tls.Config, id clientv3.LeaseID, log logrus.FieldLogger) {
	delay := time.Duration(0)
	for i := 0; ctx.Err() == nil; {
		eps := endpoints()
		endpoint := eps[i%len(eps)]
		held, refused := presentOnce(ctx, endpoint, tlsCfg, id)
		if refused != nil {
			log.Warnf("the store at %s keeps no presence for this node (%v): if this node is killed, the others notice only when its lease ends (lease_ttl)", endpoint, refused)
			return
		}
		if held {
			delay = 0
			continue // at once: the grace is short
		}
		i++
		delay = min(max(2*delay, presenceMinDelay), presenceMaxDelay)
		if ctxtime.Sleep(ctx, delay) != nil {
			return
		}
	}
}

// presentOnce holds one presence connection at endpoint until it or ctx
// ends. held: the store accepted it; refused: why it never will.
func presentOnce(ctx context.Context, endpoint string, tlsCfg *tls.Config, id clientv3.LeaseID) (held bool, refused error) {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: callTimeout}, Config: tlsCfg}
	c, err := d.DialContext(ctx, "tcp", hostPort(endpoint))
	if err != nil {
		if refusedHandshake(err) {
			return false, err
		}
		return false, nil
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if c.(*tls.Conn).ConnectionState().NegotiatedProtocol != jobauth.PresenceProto {
		return false, fmt.Errorf("it does not speak %s", jobauth.PresenceProto)
	}
	_ = c.SetDeadline(time.Now().Add(callTimeout))
	if _, err := fmt.Fprintf(c, "lease=%d\n", int64(id)); err != nil {
		return false, nil
	}
	answer, err := bufio.NewReader(io.LimitReader(c, 64)).ReadString('\n')
	if err != nil {
		return false, nil
	}
	if answer != "ok\n" {
		return false, fmt.Errorf("it answered %.80q", answer)
	}
	_ = c.SetDeadline(time.Time{})
	var b [1]byte
	_, _ = c.Read(b[:]) // the store sends nothing more: this ends with the connection
	return true, nil
}

// refusedHandshake says whether a failed TLS dial was an answer (the
// server's alert: no such protocol, our certificate refused; a
// certificate not of the job's; not TLS at all) rather than a server
// that could not be reached, which may serve later.
func refusedHandshake(err error) bool {
	var op *net.OpError
	var header tls.RecordHeaderError
	return errors.As(err, &header) || errors.Is(err, jobauth.ErrNotJobStore) ||
		(errors.As(err, &op) && op.Op == "remote error")
}

// hostPort is an endpoint without its URL scheme.
func hostPort(endpoint string) string {
	if _, rest, ok := strings.Cut(endpoint, "://"); ok {
		return rest
	}
	return endpoint
}
