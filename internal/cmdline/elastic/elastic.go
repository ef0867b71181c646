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
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/internal/cmdline"
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
	isHost                   bool
	prefix                   string
	tls                      transport.TLSInfo
	user, password           string
}

// knownKeys are the --rdzv-conf keys gorun reads; torchrun's others are
// accepted with a warning.
var knownKeys = []string{"last_call_timeout", "join_timeout", "lease_ttl", "is_host", "etcd_prefix", "cacert", "cert", "key", "user", "password"}

// secretEnv lists the environment alternatives of --rdzv-conf keys, so
// that secrets stay off the command line.
var secretEnv = map[string]string{
	"user": "GORUN_RDZV_USER", "password": "GORUN_RDZV_PASSWORD",
	"cacert": "GORUN_RDZV_CACERT", "cert": "GORUN_RDZV_CERT", "key": "GORUN_RDZV_KEY",
}

func parseConf(kv map[string]string, log logrus.FieldLogger) (conf, error) {
	c := conf{lastCall: etcdrdzv.DefaultLastCallTimeout, join: etcdrdzv.DefaultJoinTimeout, leaseTTL: etcdrdzv.DefaultLeaseTTL, prefix: etcdrdzv.DefaultPrefix}
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
	for key, dst := range map[string]*time.Duration{"last_call_timeout": &c.lastCall, "join_timeout": &c.join, "lease_ttl": &c.leaseTTL} {
		if v := get(key); v != "" {
			if *dst, err = cmdline.ParseSeconds("rdzv-conf "+key, v); err != nil {
				return c, err
			}
		}
	}
	if v := get("is_host"); v != "" {
		if c.isHost, err = strconv.ParseBool(v); err != nil {
			return c, fmt.Errorf("--rdzv-conf is_host=%q: want true or false", v)
		}
	}
	if v := get("etcd_prefix"); v != "" {
		c.prefix = v
	}
	c.tls = transport.TLSInfo{TrustedCAFile: get("cacert"), CertFile: get("cert"), KeyFile: get("key")}
	c.user, c.password = get("user"), get("password")
	if (c.tls.CertFile == "") != (c.tls.KeyFile == "") {
		return c, fmt.Errorf("--rdzv-conf: cert and key go together (or GORUN_RDZV_CERT and GORUN_RDZV_KEY)")
	}
	return c, nil
}

// Rendezvous connects to etcd (starting the embedded store first when this
// node hosts it) and joins the job.
func (e *Elastic) Rendezvous(ctx context.Context, spec cmdline.ElasticSpec) (launcher.Rendezvous, func(), error) {
	log := spec.Log
	c, err := parseConf(spec.Conf, log)
	if err != nil {
		return nil, nil, usage(err)
	}
	embedded := spec.Backend != "etcd" && spec.Backend != "etcd-v2"
	defPort := defaultEtcdPort
	if embedded {
		defPort = defaultEmbeddedPort
	}
	var endpoints []string
	for _, ep := range strings.Split(spec.Endpoint, ",") {
		host, port, err := rendezvous.SplitEndpoint(strings.TrimSpace(ep), defPort)
		if err != nil {
			return nil, nil, usage(fmt.Errorf("--rdzv-endpoint: %w", err))
		}
		endpoints = append(endpoints, net.JoinHostPort(host, strconv.Itoa(port)))
	}
	addr := spec.LocalAddr
	if addr == "" {
		if addr, err = os.Hostname(); err != nil {
			return nil, nil, fmt.Errorf("this node's address: %w (give --local-addr)", err)
		}
	}

	var server *etcdrdzv.Server
	if embedded && (c.isHost || isLocal(endpoints[0], spec.LocalAddr)) {
		server, err = etcdrdzv.StartServer(ctx, etcdrdzv.ServerConfig{ClientAddr: endpoints[0]})
		if err != nil {
			return nil, nil, fmt.Errorf("host the embedded store at --rdzv-endpoint %s: %w", endpoints[0], err)
		}
		log.Infof("hosting the job's embedded etcd at %s", endpoints[0])
	}
	release := func() {
		if server != nil {
			server.Close()
		}
	}

	var tlsCfg *tls.Config
	if c.tls.TrustedCAFile != "" || c.tls.CertFile != "" {
		if tlsCfg, err = c.tls.ClientConfig(); err != nil {
			release()
			return nil, nil, fmt.Errorf("--rdzv-conf TLS files: %w", err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: dialTimeout, TLS: tlsCfg,
		Username: c.user, Password: c.password, Logger: zap.NewNop(),
	})
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("etcd at %s: %w", strings.Join(endpoints, ","), err)
	}
	cfg := etcdrdzv.Config{
		Shape: etcdrdzv.Shape{RunID: spec.RunID, Role: spec.Role, NprocPerNode: spec.NprocPerNode,
			MinNodes: spec.MinNodes, MaxNodes: spec.MaxNodes, MaxRestarts: spec.MaxRestarts},
		NodeRank: spec.NodeRank, Addr: addr, Prefix: c.prefix,
		LastCallTimeout: c.lastCall, JoinTimeout: c.join, LeaseTTL: c.leaseTTL, Log: log,
	}
	r, err := connect(ctx, cli, cfg, endpoints, embedded && server == nil, log)
	if err != nil {
		cli.Close()
		release()
		if errors.Is(err, rendezvous.ErrShapeMismatch) || errors.Is(err, etcdrdzv.ErrInvalidConfig) {
			return nil, nil, usage(err)
		}
		return nil, nil, err
	}
	h := &hosted{Rendezvous: r, cli: cli, server: server}
	if embedded && server == nil {
		h.hint = "the node hosting the embedded store at " + endpoints[0] + " may have exited"
	}
	return h, func() {
		cli.Close()
		release()
	}, nil
}

// connect opens the rendezvous, retrying while etcd cannot be reached
// (the node hosting the embedded store may start later) until the join
// timeout.
func connect(ctx context.Context, cli *clientv3.Client, cfg etcdrdzv.Config, endpoints []string, waitingForHost bool, log logrus.FieldLogger) (*etcdrdzv.Rendezvous, error) {
	deadline := time.Now().Add(cfg.JoinTimeout)
	delay := 100 * time.Millisecond
	var lastReport time.Time
	for {
		actx, cancel := context.WithTimeout(ctx, dialTimeout)
		r, err := etcdrdzv.New(actx, cli, cfg)
		cancel()
		if err == nil {
			return r, nil
		}
		if ctx.Err() != nil || isPermanent(err) {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: etcd at %s unreachable for %v: %v", rendezvous.ErrJoinTimeout, strings.Join(endpoints, ","), cfg.JoinTimeout, err)
		}
		if time.Since(lastReport) > etcdrdzv.DefaultProgressInterval {
			hint := ""
			if waitingForHost {
				hint = " (the node hosting the embedded store may not have started yet)"
			}
			log.Warnf("etcd at %s unreachable: %v%s; retrying", strings.Join(endpoints, ","), err, hint)
			lastReport = time.Now()
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// isPermanent tells errors that retrying cannot fix.
func isPermanent(err error) bool {
	return errors.Is(err, rendezvous.ErrShapeMismatch) || errors.Is(err, etcdrdzv.ErrInvalidConfig) ||
		errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrPermissionDenied) ||
		errors.Is(err, rpctypes.ErrAuthNotEnabled) || errors.Is(err, rpctypes.ErrInvalidAuthToken)
}

// isLocal reports whether endpoint's host is this node: --local-addr when
// given, else the host's name or one of its addresses.
func isLocal(endpoint, localAddr string) bool {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return false
	}
	if localAddr != "" {
		return host == localAddr
	}
	if name, err := os.Hostname(); err == nil && host == name {
		return true
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// hosted is the rendezvous of a node that may host the embedded store:
// on Close it keeps the store up until the other nodes have left (or
// leaveTimeout passes), so that they can read the job's outcome.
type hosted struct {
	*etcdrdzv.Rendezvous
	cli    *clientv3.Client
	server *etcdrdzv.Server
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
		err = usage(err) // the node's flags do not fit the job: exit 2
	case h.hint != "" && errors.Is(err, rendezvous.ErrJoinTimeout):
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

// usage marks err as bad input (exit 2), keeping its message.
func usage(err error) error { return &usageErr{err} }

type usageErr struct{ err error }

func (u *usageErr) Error() string { return u.err.Error() }

// Unwrap gives the input error; Is makes the wrapper match
// cmdline.ErrUsage.
func (u *usageErr) Unwrap() error        { return u.err }
func (u *usageErr) Is(target error) bool { return target == cmdline.ErrUsage }
