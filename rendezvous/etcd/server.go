package etcd

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Defaults of ServerConfig, chosen for a one-member store that must be
// ready in tens of milliseconds (etcd's defaults, 100 ms ticks and a
// 1 s election, make the first election take ~0.5 s).
const (
	DefaultTickMs     = 10
	DefaultElectionMs = 100
	// DefaultReadyTimeout bounds the wait for the server to serve.
	DefaultReadyTimeout = 30 * time.Second
)

// ServerConfig configures an embedded etcd server.
type ServerConfig struct {
	// ClientAddr is the host:port clients connect to; port 0 picks a free
	// port. Default 127.0.0.1:0.
	ClientAddr string
	// PeerAddr is the host:port of the (unused, single-member) peer
	// listener. Default 127.0.0.1:0.
	PeerAddr string
	// Dir holds the data; "" uses a temporary directory removed by Close.
	Dir string
	// LogLevel is etcd's own log level (debug, info, warn, error, panic).
	// Default panic: etcd logs errors even for a normal shutdown, and the
	// failures that matter reach the agents as client errors and Err.
	LogLevel string
	// TickMs and ElectionMs are the raft heartbeat and election timeout.
	TickMs, ElectionMs uint
	// ReadyTimeout bounds StartServer's wait for the server.
	ReadyTimeout time.Duration
	// Token, when set, turns etcd's authentication on before the client
	// port opens: clients must log in as EtcdUser with Token.EtcdPassword,
	// a role that may read and write AuthPrefix only; root's password is
	// random and thrown away. Nil: no authentication (anyone who reaches
	// the port reads and writes everything).
	Token Token
	// Password, when Token is nil, is the job user's password itself.
	Password string
	// AuthPrefix is the key prefix the job user may use (DefaultPrefix).
	AuthPrefix string
	// CertFile and KeyFile make the client port TLS; with TrustedCAFile
	// clients must also present a certificate signed by that CA.
	CertFile, KeyFile, TrustedCAFile string
}

// Server is a running embedded etcd. Close it when done; it is safe to
// call Close more than once.
type Server struct {
	etcd    *embed.Etcd
	tempDir string
	// level is etcd's log level: Close silences it, as etcd logs errors
	// even for a normal shutdown.
	level zap.AtomicLevel

	closeOnce sync.Once
	closeErr  error
}

// embedConfig is the embedded etcd's configuration common to the set-up
// start and the real one; the caller adds the listeners.
func embedConfig(cfg ServerConfig, logger *zap.Logger) *embed.Config {
	ec := embed.NewConfig()
	ec.Name = "gorun"
	ec.Dir = cfg.Dir
	ec.LogLevel = cfg.LogLevel
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
	ec.TickMs, ec.ElectionMs = cfg.TickMs, cfg.ElectionMs
	// The store holds rendezvous state for one job: losing the last
	// writes in a machine crash only restarts the rendezvous.
	ec.UnsafeNoFsync = true
	// bcrypt's work factor protects passwords a person could guess; the
	// job user's is 256 bits derived from the token (or random), so the
	// least cost loses nothing, and each node's login costs about a
	// millisecond of the store's CPU instead of 30 ms (a 1024-node job
	// logged in for 30 s at bcrypt's default cost, 10).
	ec.BcryptCost = bcryptMinCost
	return ec
}

// bcryptMinCost is bcrypt.MinCost.
const bcryptMinCost = 4

// StartServer starts a one-member etcd server and waits until it serves
// clients or ctx ends.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.ClientAddr == "" {
		cfg.ClientAddr = "127.0.0.1:0"
	}
	if cfg.PeerAddr == "" {
		cfg.PeerAddr = "127.0.0.1:0"
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "panic"
	}
	if cfg.TickMs == 0 {
		cfg.TickMs = DefaultTickMs
	}
	if cfg.ElectionMs == 0 {
		cfg.ElectionMs = DefaultElectionMs
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	level, err := zap.ParseAtomicLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: log level %q: want debug, info, warn, error or panic", cfg.LogLevel)
	}
	s := &Server{level: level}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "gorun-etcd-")
		if err != nil {
			return nil, fmt.Errorf("embedded etcd: data directory: %w", err)
		}
		cfg.Dir, s.tempDir = dir, dir
	}
	logCfg := zap.NewProductionConfig()
	logCfg.Level = level
	logger, err := logCfg.Build()
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: logger: %w", err)
	}
	started := false
	defer func() {
		if !started {
			s.Close()
		}
	}()
	scheme := "http"
	if cfg.CertFile != "" {
		scheme = "https"
	}
	if cfg.Token != nil {
		cfg.Password = cfg.Token.EtcdPassword()
	}
	if cfg.Password != "" {
		// Authentication is turned on in a first start that listens on a
		// socket in the private data directory only, so that no client
		// ever reaches the store before it is on.
		if err := setUpAuth(ctx, cfg, logger); err != nil {
			return nil, err
		}
	}
	ec := embedConfig(cfg, logger)
	clientURL := url.URL{Scheme: scheme, Host: cfg.ClientAddr}
	if cfg.CertFile != "" {
		ec.ClientTLSInfo = transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TrustedCAFile: cfg.TrustedCAFile, ClientCertAuth: cfg.TrustedCAFile != ""}
	}
	peerURL := url.URL{Scheme: "http", Host: cfg.PeerAddr}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	if err := ec.Validate(); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd on %s: %w", cfg.ClientAddr, err)
	}
	s.etcd = e
	timer := time.NewTimer(cfg.ReadyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		started = true
		return s, nil
	case err := <-e.Err():
		return nil, fmt.Errorf("embedded etcd on %s: %w", cfg.ClientAddr, err)
	case <-timer.C:
		return nil, fmt.Errorf("embedded etcd on %s: not ready after %v", cfg.ClientAddr, cfg.ReadyTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Endpoints returns the addresses clients connect to (host:port).
func (s *Server) Endpoints() []string {
	var eps []string
	for _, l := range s.etcd.Clients {
		eps = append(eps, l.Addr().String())
	}
	return eps
}

// Err delivers a fatal server error; it is closed when the server stops.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the server and removes a temporary data directory. It is
// safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.level.SetLevel(zapcore.PanicLevel)
		if s.etcd != nil {
			s.etcd.Close()
		}
		if s.tempDir != "" {
			s.closeErr = os.RemoveAll(s.tempDir)
		}
	})
	return s.closeErr
}
