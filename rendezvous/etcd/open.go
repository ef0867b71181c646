package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
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
	addr := spec.LocalAddr
	if addr == "" {
		if addr, err = os.Hostname(); err != nil {
			return nil, setting.Errorf("this node's address: %w (give %s)", err, setting.Name("LocalAddr"))
		}
	}
	p, err := storeSetupOf(ctx, spec, c)
	if err != nil {
		return nil, err
	}
	token, shared, server, err := p.hostOrJoin(ctx, spec, c)
	if err != nil {
		return nil, err
	}
	release := func() {
		if server != nil {
			server.Close()
		}
		shared.Release()
	}
	cli, r, err := p.connect(ctx, spec, c, addr, token, shared, server != nil)
	if err != nil {
		release()
		return nil, err
	}
	s := &Session{Rendezvous: r, release: func() {
		cli.Close()
		release()
	}}
	s.hosting.Store(server != nil)
	if p.grows {
		s.startGrowth(c, token, p.endpoints[0], server)
	}
	switch {
	case p.embedded && p.members != nil:
		s.hint = "a majority of the nodes hosting the embedded store's members (" + strings.Join(p.endpoints, ",") + ") may have exited"
	case p.embedded && server == nil:
		s.hint = "the node hosting the embedded store at " + p.endpoints[0] + " may have exited"
	}
	return s, nil
}

// storeSetup is where the job's store is and this node's part in it.
type storeSetup struct {
	// embedded: the store is the job's own (c10d, embedded), not an
	// external etcd.
	embedded bool
	// endpoints are the store's client addresses: --rdzv-endpoint's, or
	// those of the members of an embedded store of several.
	endpoints []string
	// tokenEndpoint is --rdzv-endpoint's first address, the same on
	// every node: it names the token file the nodes share.
	tokenEndpoint string
	// members are the embedded store's members (nil: one, at the
	// endpoint); member is this node's (-1: none).
	members []jobstore.Member
	member  int
	// host: this node hosts the store (or its member).
	host bool
	// grows: the store is one member, at the endpoint, that grows to
	// three as nodes take part (grow.go).
	grows bool
}

// storeSetupOf reads where the job's store is (--rdzv-endpoint, or the
// members of an embedded store of several) and whether this node hosts
// it or its member (is_host beats the address).
func storeSetupOf(ctx context.Context, spec rendezvous.Spec, c Conf) (storeSetup, error) {
	p := storeSetup{embedded: IsEmbedded(spec.Backend), member: -1}
	var err error
	if p.endpoints, err = ParseEndpoints(spec.Endpoint, p.embedded); err != nil {
		return p, err
	}
	p.tokenEndpoint = p.endpoints[0]
	if p.embedded {
		_, epPort, _ := net.SplitHostPort(p.endpoints[0])
		port, _ := strconv.Atoi(epPort)
		if p.members, err = storeMembers(c, spec, port); err != nil {
			return p, rendezvous.BadInput(err)
		}
	} else if c.storeHosts != nil {
		spec.Log.Warnf("%s is for the embedded store (c10d, embedded); --rdzv-backend=%s uses the etcd at --rdzv-endpoint", shownSetting(spec.ShowSetting, c.storeHostsFrom), spec.Backend)
	}
	p.host = p.embedded && isLocal(ctx, p.endpoints[0], spec.LocalAddr)
	if p.members != nil {
		// Every node knows every member; a member's node hosts it.
		p.member = memberIndex(ctx, p.members, spec.LocalAddr)
		p.host = p.member >= 0
		p.endpoints = jobstore.Clients(p.members)
	}
	if p.embedded && c.isHost != nil && (p.members == nil || !*c.isHost) {
		p.host = *c.isHost
	}
	p.grows = p.embedded && p.members == nil && spec.MaxNodes >= growVoters && !c.userTLS()
	return p, nil
}

// storeMembers reads the embedded store's members: the hosts c gives
// (--rdzv-conf store_hosts, GORUN_RDZV_STORE_HOSTS), else the scheduler's
// (spec.StoreHosts). Each is a host or host:port, the port defaulting to
// defPort (the endpoint's); the peers listen on the port after it. nil
// means a store of one member, at the endpoint.
func storeMembers(c Conf, spec rendezvous.Spec, defPort int) ([]jobstore.Member, error) {
	hosts, source := c.storeHosts, c.storeHostsFrom
	switch {
	case hosts != nil:
	case len(spec.StoreHosts) > 0:
		hosts, source = spec.StoreHosts, "the scheduler's host list"
	default:
		return nil, nil
	}
	return jobstore.ParseMembers(hosts, source, defPort)
}

// memberIndex returns the member this node hosts, -1 for none.
func memberIndex(ctx context.Context, members []jobstore.Member, localAddr string) int {
	for i, m := range members {
		if isLocal(ctx, m.Client, localAddr) {
			return i
		}
	}
	return -1
}

// storeServer is this node's part of the embedded store
// (jobstore.HostStore).
type storeServer interface{ Close() error }

// hostOrJoin finds the job's token (made here by the node that hosts the
// store, or its first member, when none is given) and, on the hosting
// node, starts the store. Several agents on one host (a multi-node job
// tried on one machine): the first to bind the port hosts the store, the
// others join it as clients, as torchrun's agents do. shared is the token
// file the nodes share, if any, for the caller to release.
func (p *storeSetup) hostOrJoin(ctx context.Context, spec rendezvous.Spec, c Conf) (_ Token, shared *jobauth.SharedToken, _ storeServer, _ error) {
	log := spec.Log
	taken := func() {
		log.Infof("the store's port %s is taken on this host: another agent hosts the job's store; joining it as a client", p.endpoints[0])
		p.host = false
	}
	if p.host && p.members == nil && c.isHost == nil && portTaken(p.endpoints[0]) {
		if err := jobstore.OthersPort(p.endpoints[0]); err != nil {
			return nil, nil, nil, err
		}
		taken()
	}
	maker := p.host && p.member <= 0
	token, shared, made, err := jobauth.JobToken(ctx, c.token, jobauth.Job{RunID: spec.RunID, Endpoint: p.tokenEndpoint, Embedded: p.embedded, MaxNodes: spec.MaxNodes, Wait: c.connect}, maker, log)
	if err != nil {
		return nil, nil, nil, err
	}
	if maker && !made && p.members == nil && c.isHost == nil {
		taken() // another agent on this host made the job's token: it hosts
	}
	var server storeServer
	if p.host {
		var lost bool
		if server, lost, err = jobstore.HostStore(ctx, c.hostConfig(), token, p.endpoints[0], p.members, p.member, p.grows, log); err != nil {
			shared.Release()
			return nil, nil, nil, err
		}
		if lost {
			if err := jobstore.OthersPort(p.endpoints[0]); err != nil {
				shared.Release()
				return nil, nil, nil, err
			}
			taken()
		}
	}
	if p.embedded && server == nil {
		// The job's store is run by an agent of the job, as this user: a
		// port of this host that another user holds is not it.
		for _, ep := range p.endpoints {
			if h, _, _ := net.SplitHostPort(ep); isThisHost(ctx, h, spec.LocalAddr) {
				if err := jobstore.OthersPort(ep); err != nil {
					shared.Release()
					return nil, nil, nil, err
				}
			}
		}
	}
	return token, shared, server, nil
}

// connect opens the job's Rendezvous on the store, as this node (addr)
// with token. A node that read the token from the shared file before
// this job's host replaced an earlier job's waits for the new one.
func (p *storeSetup) connect(ctx context.Context, spec rendezvous.Spec, c Conf, addr string, token Token, shared *jobauth.SharedToken, hosting bool) (*clientv3.Client, *Rendezvous, error) {
	log := spec.Log
	tlsCfg, jobStore, err := c.storeTLS(ctx, token, p.endpoints, p.embedded)
	if err != nil {
		return nil, nil, err
	}
	if jobStore && c.user == "" {
		// The job's store's user; its password comes from the token.
		c.user, c.password = EtcdUser, token.EtcdPassword()
	}
	ccfg := clientv3.Config{
		Endpoints: p.endpoints, DialTimeout: dialTimeout, TLS: tlsCfg,
		Username: c.user, Password: c.password, Logger: zap.NewNop(),
		// A member cut off the network answers nothing and resets nothing:
		// without pings a client keeps sending it requests (and its lease's
		// keep-alives) until they time out, and the lease ends. Pinged, its
		// connection is dropped within a few seconds and the others serve.
		// etcd refuses pings more often than every 5 s unless told (the
		// embedded store is).
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
	}
	if p.embedded {
		ccfg.DialKeepAliveTime, ccfg.DialKeepAliveTimeout = jobstore.ClientKeepAliveTime, jobstore.ClientKeepAliveTimeout
	}
	cfg := Config{
		Shape: Shape{RunID: spec.RunID,
			MinNodes: spec.MinNodes, MaxNodes: spec.MaxNodes, MaxRestarts: spec.MaxRestarts, Sizes: spec.Sizes},
		NodeRank: spec.NodeRank, Addr: addr, Prefix: c.prefix,
		LastCallTimeout: c.lastCall, JoinTimeout: c.join, LeaseTTL: c.leaseTTL, UnreachableTimeout: c.connect, Log: log,
		Token: token, ShowSetting: spec.ShowSetting,
		// The job's TLS ends at a job's store's client port, which holds
		// the node's presence; the user's own TLS is etcd's.
		Presence: jobStore && tlsCfg != nil && !c.userTLS(),
	}
	if p.embedded && !hosting && p.members == nil && len(p.endpoints) == 1 {
		cfg.SoleStoreHost = p.endpoints[0]
	}
	cli, r, err := connect(ctx, ccfg, cfg, jobStore, p.embedded && !hosting, log)
	for shared != nil && !hosting && (errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, jobauth.ErrNotJobStore) || errors.Is(err, jobauth.ErrTokenRefused)) {
		// The token file was an earlier job's, read before this job's host
		// replaced it: wait for the new one.
		log.Infof("the store at %s does not match the token read in %s (an earlier job's?): waiting for this job's", p.endpoints[0], shared.Path())
		if token, err = shared.Await(ctx, token); err != nil {
			break
		}
		if ccfg.TLS, _, err = c.storeTLS(ctx, token, p.endpoints, p.embedded); err != nil {
			break
		}
		ccfg.Password, cfg.Token = token.EtcdPassword(), token
		cli, r, err = connect(ctx, ccfg, cfg, jobStore, true, log)
	}
	return cli, r, err
}

// Session is a node's part in its job's rendezvous, as Open made it: the
// job's Rendezvous, the etcd client under it, and the store (or store
// member) this node hosts. On Close the hosting node keeps the store up
// until the other nodes have left (or leaveTimeout passes), so that they
// can read the job's outcome.
type Session struct {
	*Rendezvous
	// hosting: this node hosts the store, or a member of it.
	hosting atomic.Bool
	// grower (on the store's first host) and joiner (on the other nodes)
	// grow a store of one member (grow.go); stopGrowth ends them.
	grower     *storeGrower
	joiner     *storeJoiner
	stopGrowth func()
	// hint explains a lost store on the nodes that do not host it.
	hint string
	// release closes the client, stops the store and releases the shared
	// token file.
	release func()
}

// Next joins the next round; a lost embedded store is explained.
func (s *Session) Next(ctx context.Context, node rendezvous.Node) (rendezvous.Round, error) {
	round, err := s.Rendezvous.Next(ctx, node)
	if err == nil && s.grower != nil {
		s.grower.roundClosed(round.Number, round.GroupWorldSize)
	}
	if err != nil && s.hint != "" && (errors.Is(err, rendezvous.ErrJoinTimeout) || errors.Is(err, ErrUnreachable)) {
		err = fmt.Errorf("%w (%s)", err, s.hint)
	}
	return round, err
}

// Close leaves the job, then, on the hosting node, waits for the others.
func (s *Session) Close(ctx context.Context) error {
	if s.stopGrowth != nil {
		s.stopGrowth()
	}
	err := s.Rendezvous.Close(ctx)
	if s.hosting.Load() {
		wctx, cancel := context.WithTimeout(ctx, leaveTimeout)
		defer cancel()
		s.Rendezvous.WaitForOthersToLeave(wctx)
	}
	return err
}

// Release closes the client and stops what Open started (the store this
// node hosts); call it after Close.
func (s *Session) Release() {
	if s.stopGrowth != nil {
		s.stopGrowth()
	}
	if s.joiner != nil {
		s.joiner.close()
	}
	s.release()
}

// startGrowth starts the store's growth: the grower on the node hosting
// its first member (server), the joiner on the others.
func (s *Session) startGrowth(c Conf, token Token, endpoint string, server storeServer) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	s.stopGrowth = func() {
		cancel()
		wg.Wait()
	}
	if sw, ok := server.(*jobstore.SweptServer); ok {
		s.grower = newStoreGrower(s.Rendezvous, sw.Server, endpoint, c.connect)
		wg.Go(func() { s.grower.run(ctx) })
		return
	}
	if server != nil {
		return
	}
	_, port, _ := net.SplitHostPort(endpoint)
	p, _ := strconv.Atoi(port)
	s.joiner = &storeJoiner{r: s.Rendezvous, c: c, token: token, port: p, hosting: func() { s.hosting.Store(true) }}
	wg.Go(func() { s.joiner.run(ctx) })
}

// shownSetting is what, a setting (setting.Name) or another source's
// name, as this node's user knows it (show: rendezvous.Spec.ShowSetting).
func shownSetting(show func(setting.Name) string, what any) string {
	if s, ok := what.(setting.Name); ok && show != nil {
		return show(s)
	}
	return fmt.Sprint(what)
}
