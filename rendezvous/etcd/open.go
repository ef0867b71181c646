// Package elastic adds to gorun's command line what needs etcd: the
// elastic rendezvous (external etcd, or an embedded one hosted by one of
// the nodes) and `gorun store`. Only the gorun-etcd binary links it.
package elastic

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/internal/cmdline"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher"
	"github.com/gorun-dev/gorun/rendezvous"
	etcdrdzv "github.com/gorun-dev/gorun/rendezvous/etcd"
)

// Default client ports: etcd's, and torchrun's c10d port for the embedded
// store.
const (
	defaultEtcdPort     = 2379
	defaultEmbeddedPort = 29400
	dialTimeout         = 5 * time.Second
	// leaveTimeout bounds how long the node hosting the embedded store
	// keeps it up for the other nodes to read the job's outcome and leave.
	leaveTimeout = 10 * time.Second
)

// Elastic implements cmdline.Elastic.
type Elastic struct{}

// New returns the etcd features of the command line.
func New() *Elastic { return &Elastic{} }

// conf is the parsed --rdzv-conf.
type conf struct {
	lastCall, join, leaseTTL time.Duration
	// connect bounds how long etcd may stay unreachable (connect_timeout).
	connect time.Duration
	// isHost is is_host when given: an explicit setting beats the
	// endpoint's address.
	isHost *bool
	prefix string
	// storeLogLevel is etcd's log level in the job's embedded store
	// (store_log_level; its members log to the agent's stderr).
	storeLogLevel  string
	tls            transport.TLSInfo
	user, password string
	// tokenFile and token are the job's secret: token_file, else
	// GORUN_RDZV_TOKEN. tokenFlag names the setting that gave tokenFile
	// ("": --rdzv-conf token_file).
	tokenFile string
	token     string
	tokenFlag string
}

// tokenFlagName names the setting that gave the token file, for messages.
func (c conf) tokenFlagName() string {
	if c.tokenFlag != "" {
		return c.tokenFlag
	}
	return "--rdzv-conf token_file"
}

// knownKeys are the --rdzv-conf keys gorun reads; torchrun's others are
// accepted with a warning.
var knownKeys = []string{"last_call_timeout", "join_timeout", "lease_ttl", "connect_timeout", "is_host", "etcd_prefix", "cacert", "cert", "key", "user", "password", "token_file", "store_hosts", "store_log_level"}

// secretEnv lists the environment alternatives of --rdzv-conf keys, so
// that secrets stay off the command line.
var secretEnv = map[string]string{
	"user": "GORUN_RDZV_USER", "password": "GORUN_RDZV_PASSWORD",
	"cacert": "GORUN_RDZV_CACERT", "cert": "GORUN_RDZV_CERT", "key": "GORUN_RDZV_KEY",
	"token_file": "GORUN_RDZV_TOKEN_FILE",
}

// tokenEnv holds the job token itself, for those who keep it out of files;
// passwordEnv the store user's password itself (the launcher's
// --standalone store).
const (
	tokenEnv    = "GORUN_RDZV_TOKEN"
	passwordEnv = workerenv.StorePassword
)

func parseConf(kv map[string]string, log logrus.FieldLogger) (conf, error) {
	c := conf{lastCall: etcdrdzv.DefaultLastCallTimeout, join: etcdrdzv.DefaultJoinTimeout, leaseTTL: etcdrdzv.DefaultLeaseTTL,
		connect: etcdrdzv.DefaultUnreachableTimeout, prefix: etcdrdzv.DefaultPrefix, storeLogLevel: "panic"}
	get := func(key string) string {
		if v, ok := kv[key]; ok {
			return v
		}
		if env, ok := secretEnv[key]; ok {
			return os.Getenv(env)
		}
		return ""
	}
	for k := range kv {
		if !slices.Contains(knownKeys, k) {
			log.Warnf("--rdzv-conf key %q is not used by gorun (it reads %s)", k, strings.Join(knownKeys, ", "))
		}
	}
	var err error
	for key, dst := range map[string]*time.Duration{"last_call_timeout": &c.lastCall, "join_timeout": &c.join, "lease_ttl": &c.leaseTTL, "connect_timeout": &c.connect} {
		if v := get(key); v != "" {
			if *dst, err = rendezvous.ParseSeconds("rdzv-conf "+key, v); err != nil {
				return c, err
			}
		}
	}
	if v := get("is_host"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("--rdzv-conf is_host=%q: want true or false", v)
		}
		c.isHost = &b
	}
	c.tokenFile, c.token = get("token_file"), os.Getenv(tokenEnv)
	if v := get("etcd_prefix"); v != "" {
		c.prefix = v
	}
	if v := get("store_log_level"); v != "" {
		if !slices.Contains(storeLogLevels, v) {
			return c, fmt.Errorf("--rdzv-conf store_log_level=%q: want %s", v, strings.Join(storeLogLevels, ", "))
		}
		c.storeLogLevel = v
	}
	c.tls = transport.TLSInfo{TrustedCAFile: get("cacert"), CertFile: get("cert"), KeyFile: get("key")}
	c.user, c.password = get("user"), get("password")
	if (c.tls.CertFile == "") != (c.tls.KeyFile == "") {
		return c, fmt.Errorf("--rdzv-conf: cert and key go together (or GORUN_RDZV_CERT and GORUN_RDZV_KEY)")
	}
	return c, nil
}

// storeLogLevels are etcd's log levels, for store_log_level (panic, the
// default, says nothing).
var storeLogLevels = []string{"debug", "info", "warn", "error", "panic"}

// isEmbedded says whether backend is the embedded store's (c10d,
// embedded) rather than an external etcd's.
func isEmbedded(backend string) bool { return backend != "etcd" && backend != "etcd-v2" }

// parseEndpoints reads --rdzv-endpoint (host[:port][,...]), with the
// embedded store's default port or etcd's.
func parseEndpoints(list string, embedded bool) ([]string, error) {
	defPort := defaultEtcdPort
	if embedded {
		defPort = defaultEmbeddedPort
	}
	var endpoints []string
	for _, ep := range strings.Split(list, ",") {
		host, port, err := rendezvous.SplitEndpoint(strings.TrimSpace(ep), defPort)
		if err != nil {
			return nil, fmt.Errorf("--rdzv-endpoint: %w", err)
		}
		endpoints = append(endpoints, net.JoinHostPort(host, strconv.Itoa(port)))
	}
	return endpoints, nil
}

// storeTLS is the client's TLS for the store at endpoints, and whether
// that store is a job's store (the embedded one, or `gorun store`: its
// user is EtcdUser, with a password derived from the token). The user's
// TLS (--rdzv-conf cacert, cert, key) when given; else, for a job's
// store, the job's TLS, under which the store proves it holds the token
// before this node sends its password. An external etcd
// (--rdzv-backend=etcd) is a job's store when it completes the job's TLS
// handshake (`gorun store` with the job's token); otherwise it is spoken
// to as it is, and nothing derived from the token is sent to it.
func (c conf) storeTLS(ctx context.Context, token etcdrdzv.Token, endpoints []string, embedded bool) (*tls.Config, bool, error) {
	if c.userTLS() {
		cfg, err := c.clientTLS()
		return cfg, embedded, err
	}
	if token == nil {
		return nil, false, nil
	}
	jobTLS, err := etcdrdzv.ClientTLS(token)
	if err != nil {
		return nil, false, err
	}
	if embedded {
		return jobTLS, true, nil
	}
	if c.user == "" && speaksJobTLS(ctx, endpoints, jobTLS) {
		return jobTLS, true, nil
	}
	return nil, false, nil
}

// userTLS says whether the user gave TLS files (--rdzv-conf cacert,
// cert): then the client speaks etcd's own TLS, never the job's.
func (c conf) userTLS() bool { return c.tls.TrustedCAFile != "" || c.tls.CertFile != "" }

// clientTLS is the client's TLS from --rdzv-conf cacert, cert and key;
// nil without them.
func (c conf) clientTLS() (*tls.Config, error) {
	if !c.userTLS() {
		return nil, nil
	}
	cfg, err := c.tls.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--rdzv-conf TLS files: %w", err)
	}
	return cfg, nil
}

// Rendezvous connects to etcd (starting the embedded store first when this
// node hosts it) and joins the job.
func (e *Elastic) Rendezvous(ctx context.Context, spec rendezvous.Spec) (launcher.Rendezvous, func(), error) {
	log := spec.Log
	c, err := parseConf(spec.Conf, log)
	if err != nil {
		return nil, nil, cmdline.Usage(err)
	}
	embedded := isEmbedded(spec.Backend)
	endpoints, err := parseEndpoints(spec.Endpoint, embedded)
	if err != nil {
		return nil, nil, cmdline.Usage(err)
	}
	addr := spec.LocalAddr
	if addr == "" {
		if addr, err = os.Hostname(); err != nil {
			return nil, nil, fmt.Errorf("this node's address: %w (give --local-addr)", err)
		}
	}

	storeEndpoint := endpoints[0] // the same on every node: names the shared token
	var members []storeMember
	if embedded {
		_, epPort, _ := net.SplitHostPort(endpoints[0])
		port, _ := strconv.Atoi(epPort)
		if members, err = storeMembers(spec.Conf, spec, port); err != nil {
			return nil, nil, cmdline.Usage(err)
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
			return nil, nil, err
		}
		taken()
	}
	// The node that hosts the store, or its first member, makes the token
	// when none is given.
	maker := host && member <= 0
	token, shared, made, err := jobToken(ctx, c, jobSpec{runID: spec.RunID, endpoint: storeEndpoint, embedded: embedded, maxNodes: spec.MaxNodes}, maker, log)
	if err != nil {
		return nil, nil, err
	}
	if maker && !made && members == nil && c.isHost == nil {
		taken() // another agent on this host made the job's token: it hosts
	}
	var server storeServer
	if host {
		var lost bool
		if server, lost, err = hostStore(ctx, c, token, endpoints[0], members, member, log); err != nil {
			return nil, nil, err
		}
		if lost {
			if err := othersPort(endpoints[0]); err != nil {
				return nil, nil, err
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
					return nil, nil, err
				}
			}
		}
	}
	tlsCfg, jobStore, err := c.storeTLS(ctx, token, endpoints, embedded)
	if err != nil {
		release()
		return nil, nil, err
	}
	if jobStore && c.user == "" {
		// The job's store's user; its password comes from the token.
		c.user, c.password = etcdrdzv.EtcdUser, token.EtcdPassword()
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
		ccfg.DialKeepAliveTime, ccfg.DialKeepAliveTimeout = etcdrdzv.ClientKeepAliveTime, etcdrdzv.ClientKeepAliveTimeout
	}
	cfg := etcdrdzv.Config{
		Shape: etcdrdzv.Shape{RunID: spec.RunID,
			MinNodes: spec.MinNodes, MaxNodes: spec.MaxNodes, MaxRestarts: spec.MaxRestarts, Sizes: spec.Sizes},
		NodeRank: spec.NodeRank, Addr: addr, Prefix: c.prefix,
		LastCallTimeout: c.lastCall, JoinTimeout: c.join, LeaseTTL: c.leaseTTL, UnreachableTimeout: c.connect, Log: log,
		Token: token,
		// The job's TLS ends at a job's store's client port, which holds
		// the node's presence; the user's own TLS is etcd's.
		Presence: jobStore && tlsCfg != nil && !c.userTLS(),
	}
	cli, r, err := connect(ctx, ccfg, cfg, jobStore, embedded && server == nil, log)
	for shared != nil && server == nil && (errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, etcdrdzv.ErrNotJobStore) || errors.Is(err, errTokenRefused)) {
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
		if errors.Is(err, rendezvous.ErrShapeMismatch) || errors.Is(err, rendezvous.ErrInvalidConfig) {
			return nil, nil, cmdline.Usage(err)
		}
		return nil, nil, err
	}
	h := &hosted{Rendezvous: r, cli: cli, server: server}
	switch {
	case embedded && members != nil:
		h.hint = "a majority of the nodes hosting the embedded store's members (" + strings.Join(clients(members), ",") + ") may have exited"
	case embedded && server == nil:
		h.hint = "the node hosting the embedded store at " + endpoints[0] + " may have exited"
	}
	return h, func() {
		cli.Close()
		release()
	}, nil
}

// connect opens the rendezvous, retrying while etcd cannot be reached
// (the node hosting the embedded store may start later) for up to
// cfg.UnreachableTimeout. The first failure is reported at once, with
// what a probe of each endpoint found.
func connect(ctx context.Context, ccfg clientv3.Config, cfg etcdrdzv.Config, jobStore, waitingForHost bool, log logrus.FieldLogger) (_ *clientv3.Client, _ *etcdrdzv.Rendezvous, err error) {
	endpoints := strings.Join(ccfg.Endpoints, ",")
	start := time.Now()
	delay := 100 * time.Millisecond
	var lastReport time.Time
	var cli *clientv3.Client
	defer func() {
		if err != nil && cli != nil {
			cli.Close()
		}
	}()
	for {
		if cli == nil {
			// A client that logs in fails at once while etcd is away.
			cli, err = clientv3.New(ccfg)
		}
		if cli != nil {
			actx, cancel := context.WithTimeout(ctx, dialTimeout)
			var r *etcdrdzv.Rendezvous
			r, err = etcdrdzv.New(actx, cli, cfg)
			cancel()
			if err == nil {
				return cli, r, nil
			}
		}
		if ctx.Err() != nil || isPermanent(err) {
			return nil, nil, err
		}
		diag := diagnose(ctx, ccfg.Endpoints, ccfg.TLS, jobStore)
		if diag.permanent && !jobStore && cfg.Token != nil && ccfg.TLS == nil && ccfg.Username == "" {
			// An etcd endpoint that speaks TLS may be a `gorun store` of
			// this job that was not up, or too busy, when this node first
			// asked: it is one if it proves the token now.
			if jobTLS, terr := etcdrdzv.ClientTLS(cfg.Token); terr == nil {
				if proven, _ := proveJobStore(ctx, ccfg.Endpoints, jobTLS); proven {
					ccfg.TLS, ccfg.Username, ccfg.Password, jobStore = jobTLS, etcdrdzv.EtcdUser, cfg.Token.EtcdPassword(), true
					cfg.Presence = true
					if cli != nil {
						cli.Close()
						cli = nil
					}
					continue
				}
			}
			diag.permanent = false // retried within connect_timeout
		}
		if diag.permanent && diag.cause != nil {
			return nil, nil, fmt.Errorf("%w at %s", diag.cause, diag.text)
		}
		if diag.permanent {
			return nil, nil, fmt.Errorf("%w: etcd at %s: %s", etcdrdzv.ErrUnreachable, endpoints, diag.text)
		}
		hint := ""
		if waitingForHost {
			hint = "; the node hosting the embedded store may not have started yet"
		}
		if gone := time.Since(start); gone >= cfg.UnreachableTimeout {
			return nil, nil, fmt.Errorf("%w: never reached etcd at %s in %v (--rdzv-conf connect_timeout): %s%s", etcdrdzv.ErrUnreachable, endpoints, gone.Round(time.Second), diag.text, hint)
		}
		if time.Since(lastReport) > etcdrdzv.DefaultProgressInterval {
			log.Warnf("etcd at %s unreachable: %s%s; retrying for up to %v", endpoints, diag.text, hint, (cfg.UnreachableTimeout - time.Since(start)).Round(time.Second))
			lastReport = time.Now()
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, nil, ctx.Err()
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// isPermanent tells errors that retrying cannot fix.
func isPermanent(err error) bool {
	return errors.Is(err, rendezvous.ErrShapeMismatch) || errors.Is(err, rendezvous.ErrInvalidConfig) ||
		errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrPermissionDenied) ||
		errors.Is(err, rpctypes.ErrAuthNotEnabled) || errors.Is(err, rpctypes.ErrInvalidAuthToken)
}

// portTaken reports whether endpoint (an address of this host) is bound
// by another process already.
func portTaken(endpoint string) bool {
	ln, err := net.Listen("tcp", endpoint)
	if err != nil {
		return errors.Is(err, syscall.EADDRINUSE)
	}
	ln.Close()
	return false
}

// isLocal reports whether endpoint's host is this node
// (etcdrdzv.SameHost): --local-addr when given, else the host's name or
// one of its addresses; names and addresses that resolve alike match.
func isLocal(ctx context.Context, endpoint, localAddr string) bool {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return false
	}
	return etcdrdzv.SameHost(ctx, host, localAddr)
}

// isThisHost says whether host names this machine: one of its addresses,
// loopback, the unspecified address, or its name (isLocal).
func isThisHost(ctx context.Context, host, localAddr string) bool {
	if ip := net.ParseIP(host); ip != nil && (ip.IsLoopback() || ip.IsUnspecified()) {
		return true
	}
	return etcdrdzv.SameHost(ctx, host, localAddr)
}

// hosted is the rendezvous of a node that may host the embedded store:
// on Close it keeps the store up until the other nodes have left (or
// leaveTimeout passes), so that they can read the job's outcome.
type hosted struct {
	*etcdrdzv.Rendezvous
	cli    *clientv3.Client
	server storeServer
	// hint explains a lost store on the nodes that do not host it.
	hint string
}

// Next joins the next round; a lost embedded store is explained, and a
// node that does not match the job is bad input.
func (h *hosted) Next(ctx context.Context, node rendezvous.Node) (rendezvous.Round, error) {
	round, err := h.Rendezvous.Next(ctx, node)
	switch {
	case err == nil:
	case errors.Is(err, rendezvous.ErrShapeMismatch), errors.Is(err, rendezvous.ErrInvalidNode):
		err = cmdline.Usage(err) // the node's flags do not fit the job: exit 2
	case h.hint != "" && (errors.Is(err, rendezvous.ErrJoinTimeout) || errors.Is(err, etcdrdzv.ErrUnreachable)):
		err = fmt.Errorf("%w (%s)", err, h.hint)
	}
	return round, err
}

// Close leaves the job, then, on the hosting node, waits for the others.
func (h *hosted) Close(ctx context.Context) error {
	err := h.Rendezvous.Close(ctx)
	if h.server != nil {
		wctx, cancel := context.WithTimeout(ctx, leaveTimeout)
		defer cancel()
		h.Rendezvous.WaitForOthersToLeave(wctx)
	}
	return err
}
