package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/rendezvous"
)

// leaveTimeout bounds how long the node hosting the embedded store keeps
// it up for the other nodes to read the job's outcome and leave.
const leaveTimeout = 10 * time.Second

// Open connects this node to its job's rendezvous as spec describes it:
// it hosts the embedded store (c10d, embedded) or its member when this
// node is the store's host (a member of a store of several runs as this
// program's `store` command, so the program must be gorun-etcd), finds
// the job's token (given, or shared through the home folder), connects
// to the store, retrying within connect_timeout and saying what a probe
// of each endpoint found, and opens the job's Rendezvous. Bad input
// matches rendezvous.ErrInvalidConfig. The Session's Release undoes it
// all, after Close.
func Open(ctx context.Context, spec rendezvous.Spec) (*Session, error) {
	log := spec.Log
	c, err := ParseConf(spec.Conf, log)
	if err != nil {
		return nil, err
	}
	embedded := IsEmbedded(spec.Backend)
	endpoints, err := ParseEndpoints(spec.Endpoint, embedded)
	if err != nil {
		return nil, err
	}
	addr := spec.LocalAddr
	if addr == "" {
		if addr, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("this node's address: %w (give --local-addr)", err)
		}
	}

	storeEndpoint := endpoints[0] // the same on every node: names the shared token
	var members []storeMember
	if embedded {
		_, epPort, _ := net.SplitHostPort(endpoints[0])
		port, _ := strconv.Atoi(epPort)
		if members, err = storeMembers(spec.Conf, spec, port); err != nil {
			return nil, rendezvous.BadInput(err)
		}
	} else if spec.Conf["store_hosts"] != "" {
		log.Warnf("--rdzv-conf store_hosts is for the embedded store (c10d, embedded); --rdzv-backend=%s uses the etcd at --rdzv-endpoint", spec.Backend)
	}
	member := -1
	host := embedded && isLocal(ctx, endpoints[0], spec.LocalAddr)
	if members != nil {
		// Every node knows every member; a member's node hosts it.
		member = memberIndex(ctx, members, spec.LocalAddr)
		host = member >= 0
		endpoints = clients(members)
	}
	if embedded && c.isHost != nil && (members == nil || !*c.isHost) {
		host = *c.isHost
	}
	// Several agents on one host (a multi-node job tried on one machine):
	// the first to bind the port hosts the store, the others join it as
	// clients, as torchrun's agents do.
	taken := func() {
		log.Infof("the store's port %s is taken on this host: another agent hosts the job's store; joining it as a client", endpoints[0])
		host = false
	}
	if host && members == nil && c.isHost == nil && portTaken(endpoints[0]) {
		if err := othersPort(endpoints[0]); err != nil {
			return nil, err
		}
		taken()
	}
	// The node that hosts the store, or its first member, makes the token
	// when none is given.
	maker := host && member <= 0
	token, shared, made, err := jobToken(ctx, c, jobSpec{runID: spec.RunID, endpoint: storeEndpoint, embedded: embedded, maxNodes: spec.MaxNodes}, maker, log)
	if err != nil {
		return nil, err
	}
	if maker && !made && members == nil && c.isHost == nil {
		taken() // another agent on this host made the job's token: it hosts
	}
	var server storeServer
	if host {
		var lost bool
		if server, lost, err = hostStore(ctx, c, token, endpoints[0], members, member, log); err != nil {
			return nil, err
		}
		if lost {
			if err := othersPort(endpoints[0]); err != nil {
				return nil, err
			}
			taken()
		}
	}
	release := func() {
		if server != nil {
			server.Close()
		}
		shared.release()
	}
	if embedded && server == nil {
		// The job's store is run by an agent of the job, as this user: a
		// port of this host that another user holds is not it.
		for _, ep := range endpoints {
			if h, _, _ := net.SplitHostPort(ep); isThisHost(ctx, h, spec.LocalAddr) {
				if err := othersPort(ep); err != nil {
					release()
					return nil, err
				}
			}
		}
	}
	tlsCfg, jobStore, err := c.storeTLS(ctx, token, endpoints, embedded)
	if err != nil {
		release()
		return nil, err
	}
	if jobStore && c.user == "" {
		// The job's store's user; its password comes from the token.
		c.user, c.password = EtcdUser, token.EtcdPassword()
	}
	ccfg := clientv3.Config{
		Endpoints: endpoints, DialTimeout: dialTimeout, TLS: tlsCfg,
		Username: c.user, Password: c.password, Logger: zap.NewNop(),
		// A member cut off the network answers nothing and resets nothing:
		// without pings a client keeps sending it requests (and its lease's
		// keep-alives) until they time out, and the lease ends. Pinged, its
		// connection is dropped within a few seconds and the others serve.
		// etcd refuses pings more often than every 5 s unless told (the
		// embedded store is).
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
	}
	if embedded {
		ccfg.DialKeepAliveTime, ccfg.DialKeepAliveTimeout = ClientKeepAliveTime, ClientKeepAliveTimeout
	}
	cfg := Config{
		Shape: Shape{RunID: spec.RunID,
			MinNodes: spec.MinNodes, MaxNodes: spec.MaxNodes, MaxRestarts: spec.MaxRestarts, Sizes: spec.Sizes},
		NodeRank: spec.NodeRank, Addr: addr, Prefix: c.prefix,
		LastCallTimeout: c.lastCall, JoinTimeout: c.join, LeaseTTL: c.leaseTTL, UnreachableTimeout: c.connect, Log: log,
		Token: token,
		// The job's TLS ends at a job's store's client port, which holds
		// the node's presence; the user's own TLS is etcd's.
		Presence: jobStore && tlsCfg != nil && !c.userTLS(),
	}
	cli, r, err := connect(ctx, ccfg, cfg, jobStore, embedded && server == nil, log)
	for shared != nil && server == nil && (errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, ErrNotJobStore) || errors.Is(err, errTokenRefused)) {
		// The token file was an earlier job's, read before this job's host
		// replaced it: wait for the new one.
		log.Infof("the store at %s does not match the token read in %s (an earlier job's?): waiting for this job's", endpoints[0], shared.path)
		if token, err = shared.await(ctx, token); err != nil {
			break
		}
		if ccfg.TLS, _, err = c.storeTLS(ctx, token, endpoints, embedded); err != nil {
			break
		}
		ccfg.Password, cfg.Token = token.EtcdPassword(), token
		cli, r, err = connect(ctx, ccfg, cfg, jobStore, true, log)
	}
	if err != nil {
		release()
		return nil, err
	}
	s := &Session{Rendezvous: r, hosting: server != nil, release: func() {
		cli.Close()
		release()
	}}
	switch {
	case embedded && members != nil:
		s.hint = "a majority of the nodes hosting the embedded store's members (" + strings.Join(clients(members), ",") + ") may have exited"
	case embedded && server == nil:
		s.hint = "the node hosting the embedded store at " + endpoints[0] + " may have exited"
	}
	return s, nil
}

// Session is a node's part in its job's rendezvous, as Open made it: the
// job's Rendezvous, the etcd client under it, and the store (or store
// member) this node hosts. On Close the hosting node keeps the store up
// until the other nodes have left (or leaveTimeout passes), so that they
// can read the job's outcome.
type Session struct {
	*Rendezvous
	// hosting: this node hosts the store, or a member of it.
	hosting bool
	// hint explains a lost store on the nodes that do not host it.
	hint string
	// release closes the client, stops the store and releases the shared
	// token file.
	release func()
}

// Next joins the next round; a lost embedded store is explained.
func (s *Session) Next(ctx context.Context, node rendezvous.Node) (rendezvous.Round, error) {
	round, err := s.Rendezvous.Next(ctx, node)
	if err != nil && s.hint != "" && (errors.Is(err, rendezvous.ErrJoinTimeout) || errors.Is(err, ErrUnreachable)) {
		err = fmt.Errorf("%w (%s)", err, s.hint)
	}
	return round, err
}

// Close leaves the job, then, on the hosting node, waits for the others.
func (s *Session) Close(ctx context.Context) error {
	err := s.Rendezvous.Close(ctx)
	if s.hosting {
		wctx, cancel := context.WithTimeout(ctx, leaveTimeout)
		defer cancel()
		s.Rendezvous.WaitForOthersToLeave(wctx)
	}
	return err
}

// Release closes the client and stops what Open started (the store this
// node hosts); call it after Close.
func (s *Session) Release() { s.release() }
