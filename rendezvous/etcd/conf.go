package etcd

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// Default client ports: etcd's, and torchrun's c10d port for the embedded
// store.
const (
	defaultEtcdPort     = 2379
	defaultEmbeddedPort = 29400
	dialTimeout         = 5 * time.Second
)

// Conf is the etcd backend's --rdzv-conf, parsed (ParseConf).
type Conf struct {
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
	// token is the job's secret as given: token_file, else
	// GORUN_RDZV_TOKEN.
	token jobauth.Given
	// storeHosts are the embedded store's member hosts (store_hosts, else
	// GORUN_RDZV_STORE_HOSTS), nil when neither gives any; storeHostsFrom
	// names which, for messages.
	storeHosts     []string
	storeHostsFrom any
}

// knownKeys are the --rdzv-conf keys gorun reads; torchrun's others are
// accepted with a warning.
var knownKeys = []string{"last_call_timeout", "join_timeout", "lease_ttl", "connect_timeout", "is_host", "etcd_prefix", "cacert", "cert", "key", "user", "password", "token_file", "store_hosts", "store_log_level"}

// secretEnv lists the environment alternatives of --rdzv-conf keys, so
// that secrets stay off the command line.
var secretEnv = map[string]string{
	"user": "GORUN_RDZV_USER", "password": rendezvous.PasswordEnv,
	"cacert": "GORUN_RDZV_CACERT", "cert": "GORUN_RDZV_CERT", "key": "GORUN_RDZV_KEY",
	"token_file": rendezvous.TokenFileEnv,
}

// storeHostsEnv lists the embedded store's member hosts, separated by
// commas (--rdzv-conf store_hosts separates them with '+', as its own
// pairs are separated by commas).
const storeHostsEnv = "GORUN_RDZV_STORE_HOSTS"

// ParseConf reads the etcd backend's --rdzv-conf (kv, key by key, with
// the environment alternatives of its secrets); keys it does not use are
// logged on log. Its errors are bad input (rendezvous.ErrInvalidConfig).
func ParseConf(kv map[string]string, log logrus.FieldLogger) (Conf, error) {
	c, err := parseConf(kv, log)
	return c, rendezvous.BadInput(err)
}

func parseConf(kv map[string]string, log logrus.FieldLogger) (Conf, error) {
	c := Conf{lastCall: DefaultLastCallTimeout, join: DefaultJoinTimeout, leaseTTL: DefaultLeaseTTL,
		connect: DefaultUnreachableTimeout, prefix: DefaultPrefix, storeLogLevel: "panic"}
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
			if *dst, err = rendezvous.ParseSeconds(v); err != nil {
				return c, setting.Errorf("%s=%q: %w", setting.Name("Conf."+key), v, err)
			}
		}
	}
	if v := get("is_host"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return c, setting.Errorf("%s=%q: want true or false", setting.Name("Conf.is_host"), v)
		}
		c.isHost = &b
	}
	c.token = jobauth.Given{File: get("token_file"), Text: os.Getenv(rendezvous.TokenEnv)}
	if v := get("etcd_prefix"); v != "" {
		c.prefix = v
	}
	if v := get("store_log_level"); v != "" {
		if !slices.Contains(storeLogLevels, v) {
			return c, setting.Errorf("%s=%q: want %s", setting.Name("Conf.store_log_level"), v, strings.Join(storeLogLevels, ", "))
		}
		c.storeLogLevel = v
	}
	switch {
	case kv["store_hosts"] != "":
		c.storeHosts = strings.FieldsFunc(kv["store_hosts"], func(r rune) bool { return r == '+' || r == ';' || r == ' ' })
		c.storeHostsFrom = setting.Name("Conf.store_hosts")
	case os.Getenv(storeHostsEnv) != "":
		c.storeHosts, c.storeHostsFrom = strings.Split(os.Getenv(storeHostsEnv), ","), storeHostsEnv
	}
	c.tls = transport.TLSInfo{TrustedCAFile: get("cacert"), CertFile: get("cert"), KeyFile: get("key")}
	c.user, c.password = get("user"), get("password")
	if (c.tls.CertFile == "") != (c.tls.KeyFile == "") {
		return c, setting.Errorf("%s and %s go together (or GORUN_RDZV_CERT and GORUN_RDZV_KEY)", setting.Name("Conf.cert"), setting.Name("Conf.key"))
	}
	return c, nil
}

// storeLogLevels are etcd's log levels, for store_log_level (panic, the
// default, says nothing).
var storeLogLevels = []string{"debug", "info", "warn", "error", "panic"}

// IsEmbedded says whether backend is the embedded store's (c10d,
// embedded) rather than an external etcd's.
func IsEmbedded(backend string) bool { return backend != "etcd" && backend != "etcd-v2" }

// ParseEndpoints reads --rdzv-endpoint (host[:port][,...]), with the
// embedded store's default port or etcd's.
func ParseEndpoints(list string, embedded bool) ([]string, error) {
	defPort := defaultEtcdPort
	if embedded {
		defPort = defaultEmbeddedPort
	}
	var endpoints []string
	for _, ep := range strings.Split(list, ",") {
		host, port, err := rendezvous.SplitEndpoint(strings.TrimSpace(ep), defPort)
		if err != nil {
			return nil, rendezvous.BadInput(setting.Errorf("%s: %w", setting.Name("Endpoint"), err))
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
func (c Conf) storeTLS(ctx context.Context, token Token, endpoints []string, embedded bool) (*tls.Config, bool, error) {
	if c.userTLS() {
		cfg, err := c.clientTLS()
		return cfg, embedded, err
	}
	if token == nil {
		return nil, false, nil
	}
	jobTLS, err := jobauth.ClientTLS(token)
	if err != nil {
		return nil, false, err
	}
	if embedded {
		return jobTLS, true, nil
	}
	if c.user == "" && jobauth.SpeaksJobTLS(ctx, endpoints, jobTLS) {
		return jobTLS, true, nil
	}
	return nil, false, nil
}

// hostConfig is what this node's part of the job's store takes from c.
func (c Conf) hostConfig() jobstore.HostConfig {
	return jobstore.HostConfig{Prefix: c.prefix, LogLevel: c.storeLogLevel, TLS: c.tls, ReadyTimeout: c.connect, IsHostSet: c.isHost != nil}
}

// userTLS says whether the user gave TLS files (--rdzv-conf cacert,
// cert): then the client speaks etcd's own TLS, never the job's.
func (c Conf) userTLS() bool { return c.tls.TrustedCAFile != "" || c.tls.CertFile != "" }

// clientTLS is the client's TLS from --rdzv-conf cacert, cert and key;
// nil without them.
func (c Conf) clientTLS() (*tls.Config, error) {
	if !c.userTLS() {
		return nil, nil
	}
	cfg, err := c.tls.ClientConfig()
	if err != nil {
		return nil, setting.Errorf("the TLS files of %s: %w", setting.Name("Conf"), err)
	}
	return cfg, nil
}
