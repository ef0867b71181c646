package jobstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
)

// Defaults of ServerConfig, chosen for a one-member store that must be
// ready in tens of milliseconds (etcd's defaults, 100 ms ticks and a
// 1 s election, make the first election take ~0.5 s).
const (
	DefaultTickMs     = 10
	DefaultElectionMs = 100
	// DefaultReadyTimeout bounds the wait for the server to serve.
	DefaultReadyTimeout = 30 * time.Second
	// ClusterTickMs and ClusterElectionMs are the raft timing of a store
	// of several members: a lost leader is replaced within about a second.
	ClusterTickMs     = 50
	ClusterElectionMs = 500
	// ClientKeepAliveTime and ClientKeepAliveTimeout are the gRPC pings a
	// client of the embedded store may send (the store allows them): a
	// member cut off the network is dropped by its clients within their sum.
	ClientKeepAliveTime    = time.Second
	ClientKeepAliveTimeout = time.Second
	// DefaultPrefix is the key prefix the job's user may use when
	// ServerConfig.AuthPrefix is empty: the rendezvous's keys' (package
	// etcd's DefaultPrefix is this one).
	DefaultPrefix = "/gorun"
	// dialTimeout bounds the dial of a client of this member's own
	// socket (etcd's root's, a presence revocation's).
	dialTimeout = 5 * time.Second
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
	// port opens: clients must log in as rendezvous.EtcdUser with
	// Token.EtcdPassword,
	// a role that may read and write AuthPrefix only; root's password is
	// random and thrown away. Nil: no authentication (anyone who reaches
	// the port reads and writes everything).
	Token rendezvous.Token
	// Password, when Token is nil, is the job user's password itself.
	Password string
	// AuthPrefix is the key prefix the job user may use (DefaultPrefix).
	AuthPrefix string
	// CertFile and KeyFile make the client port TLS; with TrustedCAFile
	// clients must also present a certificate signed by that CA.
	CertFile, KeyFile, TrustedCAFile string
	// Cluster, for a store of several members, is every member's peer
	// address (host:port), in the same order on every member; Member is
	// this member's index in it. Empty: a store of one member. The
	// members authenticate each other with TLS whose CA key comes from
	// Token (then required), and a member starts serving once a majority
	// of them run.
	Cluster []string
	Member  int
	// Growable makes a store of one member that others can join later
	// (growserver.go): its peer port speaks the job's mutual TLS (Token
	// required), its auth tokens are good at every member, and the root
	// password stays with the Server for the membership calls.
	Growable bool
	// Join, for a member joining a running store, is that store's
	// members as etcd's initial cluster (name=https://host:port,...,
	// this one included), as Server.AddLearner returned it; Name is this
	// member's name in it, and PeerAddr its peer address.
	Join, Name string

	// peerTLS is the member's peer TLS and authToken etcd's auth token
	// setting, made by StartServer; peerListen is the address the peer
	// port binds (PeerAddr, or this member's, with a host name resolved).
	peerTLS    transport.TLSInfo
	authToken  string
	peerListen string
}

// clustered reports whether cfg is a member of a store of several.
func (cfg ServerConfig) clustered() bool { return len(cfg.Cluster) > 1 }

// peered reports whether cfg's member has (or may have) peers: one of a
// store of several, a growable one, or one that joins.
func (cfg ServerConfig) peered() bool { return cfg.clustered() || cfg.Growable || cfg.Join != "" }

// MemberName is the etcd name of member i of the job's store.
func MemberName(i int) string { return "gorun-" + strconv.Itoa(i) }

// Server is a running embedded etcd. Close it when done; it is safe to
// call Close more than once.
type Server struct {
	etcd    *embed.Etcd
	tempDir string
	// runDir (private, in the data folder) holds the client socket and a
	// member's peer TLS files; removed by Close.
	runDir string
	// port is the client port, forwarded to the socket.
	port *clientPort
	// ready is set once etcd served (StartServer succeeded).
	ready bool
	// errc is Err's channel (forwardErrors); peersClosed says a single
	// member's peer listener was closed on purpose.
	errc        chan error
	peersClosed atomic.Bool
	// level is etcd's log level: Close silences it, as etcd logs errors
	// even for a normal shutdown.
	level zap.AtomicLevel
	// socket is etcd's client socket; root, for a growable store, the
	// root password, for the membership calls (growserver.go).
	socket, root string
	// peered: the member has or may have peers (ServerConfig.peered).
	peered bool

	closeOnce sync.Once
	closeErr  error
}

// embedConfig is the embedded etcd's configuration common to the set-up
// start and the real one: the member, its peers and its data; the caller
// adds the client listeners.
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
	// Clients ping as often as ClientKeepAliveTime (etcd refuses pings
	// more often than every 5 s by default).
	ec.GRPCKeepAliveMinTime = ClientKeepAliveTime / 2
	if cfg.Growable || cfg.Join != "" {
		growableConfig(ec, cfg)
		return ec
	}
	if !cfg.clustered() {
		peer := url.URL{Scheme: "https", Host: cfg.PeerAddr}
		ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{{Scheme: "https", Host: cfg.peerListen}}, []url.URL{peer}
		ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
		ec.PeerTLSInfo = cfg.peerTLS
		if cfg.authToken != "" { // etcd's default, simple tokens, otherwise
			ec.AuthToken = cfg.authToken
		}
		return ec
	}
	ec.Name = MemberName(cfg.Member)
	// Listen on the address, advertise the name the members were given:
	// each peer resolves it its own way.
	ec.ListenPeerUrls = []url.URL{{Scheme: "https", Host: cfg.peerListen}}
	ec.AdvertisePeerUrls = []url.URL{{Scheme: "https", Host: cfg.Cluster[cfg.Member]}}
	var initial []string
	for i, addr := range cfg.Cluster {
		initial = append(initial, MemberName(i)+"=https://"+addr)
	}
	ec.InitialCluster = strings.Join(initial, ",")
	// Members of different jobs never take each other for their own.
	ec.InitialClusterToken = clusterToken(cfg.Token)
	ec.ClusterState = embed.ClusterStateFlagNew
	ec.PeerTLSInfo = cfg.peerTLS
	if cfg.authToken != "" { // etcd's default, simple tokens, otherwise
		ec.AuthToken = cfg.authToken
	}
	return ec
}

// maxSocketPath is the longest path of a Unix socket (sun_path, with its
// terminating zero).
const maxSocketPath = 108

// bcryptMinCost is bcrypt.MinCost.
const bcryptMinCost = 4

// StartServer starts an embedded etcd (a store of one member, or one
// member of cfg.Cluster) and waits until it serves clients or ctx ends:
// its peers secured, its client port bound, authentication on, then the
// port opened.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// etcd binds IP literals only: a host name (a Slurm node's) is bound
	// at its address on this host.
	if cfg.peerListen, err = ListenAddress(ctx, cfg.PeerAddr); err != nil {
		return nil, fmt.Errorf("embedded etcd: peer address: %w", err)
	}
	clientListen, err := ListenAddress(ctx, cfg.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: client address: %w", err)
	}
	level, err := zap.ParseAtomicLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: log level %q: want debug, info, warn, error or panic", cfg.LogLevel)
	}
	s := &Server{level: level, peered: cfg.peered()}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "gorun-etcd-")
		if err != nil {
			return nil, fmt.Errorf("embedded etcd: data directory: %w", err)
		}
		cfg.Dir, s.tempDir = dir, dir
	}
	logCfg := zap.NewProductionConfig()
	logCfg.Level = level
	logger, err := logCfg.Build(quietEtcdLogs())
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: logger: %w", err)
	}
	started := false
	defer func() {
		if !started {
			s.Close()
		}
	}()
	if err := s.makeRunDir(cfg.Dir); err != nil {
		return nil, err
	}
	if err := cfg.securePeers(s.runDir); err != nil {
		return nil, err
	}
	socket := filepath.Join(s.runDir, "client.sock")
	s.socket = socket
	if err := s.setUpClientPort(&cfg, clientListen, socket); err != nil {
		return nil, err
	}
	if err := s.startEtcd(ctx, cfg, logger, socket); err != nil {
		return nil, err
	}
	if cfg.Password != "" && cfg.Join == "" {
		// A member that joins finds authentication on: it came by raft.
		root, err := setUpAuth(ctx, s.etcd, cfg)
		if err != nil {
			return nil, err
		}
		if cfg.Growable {
			s.root = root
		}
	}
	s.errc = make(chan error, 1)
	if !cfg.peered() {
		s.closePeerPort()
	}
	go s.forwardErrors()
	if s.port.tls != nil {
		s.port.grpc = startGRPCPort(s.etcd)
	}
	s.port.open()
	started, s.ready = true, true
	return s, nil
}

// withDefaults fills in what cfg leaves out, and checks a member's place
// in its cluster.
func (cfg ServerConfig) withDefaults() (ServerConfig, error) {
	if cfg.ClientAddr == "" {
		cfg.ClientAddr = "127.0.0.1:0"
	}
	if cfg.PeerAddr == "" {
		cfg.PeerAddr = "127.0.0.1:0"
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "panic"
	}
	if err := cfg.checkGrowth(); err != nil {
		return cfg, err
	}
	if cfg.Growable || cfg.Join != "" {
		cfg.TickMs, cfg.ElectionMs = cmp.Or(cfg.TickMs, ClusterTickMs), cmp.Or(cfg.ElectionMs, ClusterElectionMs)
	}
	if cfg.clustered() {
		if cfg.Member < 0 || cfg.Member >= len(cfg.Cluster) {
			return cfg, fmt.Errorf("embedded etcd: member %d of a store of %d", cfg.Member, len(cfg.Cluster))
		}
		if cfg.Token == nil {
			return cfg, fmt.Errorf("embedded etcd: a store of several members needs the job token (its members authenticate each other with it)")
		}
		cfg.PeerAddr = cfg.Cluster[cfg.Member]
		// Members on several hosts: raft's timing must bear a busy
		// network and machine (a training node's CPUs are taken).
		if cfg.TickMs == 0 {
			cfg.TickMs = ClusterTickMs
		}
		if cfg.ElectionMs == 0 {
			cfg.ElectionMs = ClusterElectionMs
		}
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
	return cfg, nil
}

// makeRunDir makes the private folder for the client socket and a
// member's peer TLS, in the data folder dir: whoever removes that
// removes it too.
func (s *Server) makeRunDir(dir string) error {
	s.runDir = filepath.Join(dir, "gorun-run")
	var err error
	if len(s.runDir)+len("/client.sock") >= maxSocketPath {
		// A Unix socket's path must be short: the temporary folder then.
		s.runDir, err = os.MkdirTemp("", "gorun-etcd-run-")
	} else if err = os.RemoveAll(s.runDir); err == nil {
		err = os.MkdirAll(s.runDir, 0o700)
	}
	if err != nil {
		return fmt.Errorf("embedded etcd: %w", err)
	}
	return nil
}

// securePeers sets the member's peer TLS (files in runDir) and, for a
// store with a job token, etcd's auth tokens.
func (cfg *ServerConfig) securePeers(runDir string) error {
	host, _, err := net.SplitHostPort(cfg.PeerAddr)
	if !cfg.peered() {
		// One member has no peers, but etcd always opens a peer port,
		// which speaks raft to whoever connects: in plain HTTP, another
		// local user could pose as a leader and switch authentication
		// off. It takes only certificates of a CA made for this store
		// alone (a throwaway key), that is, nobody's.
		if err != nil {
			return fmt.Errorf("embedded etcd: peer address %q: %w", cfg.PeerAddr, err)
		}
		alone, err := rendezvous.NewToken()
		if err != nil {
			return err
		}
		if cfg.peerTLS, err = jobauth.PeerTLS(alone, runDir, host); err != nil {
			return err
		}
		return cfg.signedTokens(runDir)
	}
	if err != nil {
		return fmt.Errorf("embedded etcd: member %d's peer address %q: %w", cfg.Member, cfg.PeerAddr, err)
	}
	if cfg.peerTLS, err = jobauth.PeerTLS(cfg.Token, runDir, host); err != nil {
		return err
	}
	return cfg.signedTokens(runDir)
}

// signedTokens makes the store's auth tokens signed ones (JWT), good for
// jobauth.SignInLife: a node logs in once and its client presents that
// token from then on (jobauth.SignIn), instead of logging in again at
// each stream it opens. A store of one member that no other will join
// signs them with a random key of its own, which never leaves it: no
// one can sign a token, for the job's user or for root. The members of
// a store of several (or one that may grow) must share their key, and
// derive it from the job token (jobauth.SignInKey), which also makes a
// token good at every member (etcd's simple tokens are one member's own:
// a client that logged in at one member was refused by another); a
// holder of the job token can then sign one itself, for any user
// (docs/security.md). Without a job token the store keeps etcd's simple
// tokens.
func (cfg *ServerConfig) signedTokens(runDir string) error {
	if cfg.Token == nil {
		return nil
	}
	secret := jobauth.SignInKey(cfg.Token)
	if !cfg.peered() {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return fmt.Errorf("embedded etcd: sign-in key: %w", err)
		}
	}
	key := filepath.Join(runDir, "jwt.key")
	if err := os.WriteFile(key, secret, 0o600); err != nil {
		return fmt.Errorf("embedded etcd: %w", err)
	}
	cfg.authToken = "jwt,priv-key=" + key + ",sign-method=HS256,ttl=" + jobauth.SignInLife.String()
	return nil
}

// setUpClientPort binds the client port at listen, forwarding to socket
// once opened, and sets cfg's job password.
func (s *Server) setUpClientPort(cfg *ServerConfig, listen, socket string) error {
	// Each client costs this process a descriptor (three where the port
	// forwards it to etcd's socket: without the job's TLS): a store of a
	// few thousand nodes needs more than a shell's usual soft limit, and
	// etcd exits when it runs out.
	files := RaiseFileLimit()
	// A store with a token ends the job's TLS at its client port, unless
	// the user gave TLS of their own (etcd's, end to end).
	var jobTLS *tls.Config
	var err error
	if cfg.Token != nil && cfg.CertFile == "" {
		if jobTLS, err = jobauth.ServerTLS(cfg.Token); err != nil {
			return err
		}
	}
	// The client port is bound now and opened once authentication is on.
	if s.port, err = bindClientPort(listen, socket, jobTLS, defaultPendingLimits(files)); err != nil {
		return fmt.Errorf("embedded etcd on %s: %w", cfg.ClientAddr, err)
	}
	if cfg.Token != nil {
		cfg.Password = cfg.Token.EtcdPassword()
	}
	if jobTLS != nil {
		s.port.presence = newPresences(socket, cfg.Password)
	}
	return nil
}

// startEtcd starts etcd serving its clients on socket and waits until it
// is ready.
func (s *Server) startEtcd(ctx context.Context, cfg ServerConfig, logger *zap.Logger, socket string) error {
	scheme, socketScheme := "http", "unix"
	if cfg.CertFile != "" {
		scheme, socketScheme = "https", "unixs"
	}
	ec := embedConfig(cfg, logger)
	if cfg.CertFile != "" {
		ec.ClientTLSInfo = transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TrustedCAFile: cfg.TrustedCAFile, ClientCertAuth: cfg.TrustedCAFile != ""}
	}
	ec.ListenClientUrls = []url.URL{{Scheme: socketScheme, Path: socket}}
	ec.AdvertiseClientUrls = []url.URL{{Scheme: scheme, Host: advertised(cfg.ClientAddr, s.port.addr())}}
	if err := ec.Validate(); err != nil {
		return fmt.Errorf("embedded etcd: %w", err)
	}
	e, err := embed.StartEtcd(ec)
	if err != nil && (cfg.clustered() || cfg.Join != "") && strings.Contains(err.Error(), "has already been bootstrapped") {
		// etcd's words for a member whose place the store gave away
		// while it was gone.
		return fmt.Errorf("embedded etcd on %s: %w: %w", cfg.ClientAddr, ErrMemberTaken, err)
	}
	if err != nil {
		return fmt.Errorf("embedded etcd on %s: %w", cfg.ClientAddr, err)
	}
	s.etcd = e
	timer := time.NewTimer(cfg.ReadyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("embedded etcd on %s: %w", cfg.ClientAddr, err)
	case <-timer.C:
		if cfg.clustered() {
			return fmt.Errorf("embedded etcd: member %d at %s: no majority of the store's members %v started within %v", cfg.Member, cfg.PeerAddr, cfg.Cluster, cfg.ReadyTimeout)
		}
		return fmt.Errorf("embedded etcd on %s: not ready after %v", cfg.ClientAddr, cfg.ReadyTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closePeerPort closes a single member's peer listeners. It has no peers,
// yet etcd always listens for them: nobody must reach that port (a flood
// of it wedged etcd's listener and its Close). The listener's end is not
// a failure of the store, and etcd's error line for it is kept out of
// the log.
func (s *Server) closePeerPort() {
	s.peersClosed.Store(true)
	level := s.level.Level()
	s.level.SetLevel(zapcore.PanicLevel)
	for _, p := range s.etcd.Peers {
		p.Listener.Close()
	}
	t := time.NewTimer(time.Second)
	select {
	case err := <-s.etcd.Err():
		if !isClosedErr(err) {
			s.errc <- err
		}
	case <-t.C:
	}
	t.Stop()
	s.level.SetLevel(level)
}

// isClosedErr says whether err is a listener's end after its Close.
func isClosedErr(err error) bool {
	return err != nil && (errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "use of closed network connection"))
}

// forwardErrors passes etcd's fatal errors on to Err, leaving out the end
// of the peer listeners closed on purpose; it ends when etcd closes its
// channel (Close).
func (s *Server) forwardErrors() {
	defer close(s.errc)
	for err := range s.etcd.Err() {
		if s.peersClosed.Load() && isClosedErr(err) {
			continue
		}
		select {
		case s.errc <- err:
		default: // one fatal error is enough to tell
		}
	}
}

// Endpoints returns the addresses clients connect to (host:port).
func (s *Server) Endpoints() []string { return []string{s.port.addr()} }

// advertised is the client address to advertise for the one asked for
// (given) once bound (bound): the bound port, at the host asked for
// unless the bind took a specific address of it.
func advertised(given, bound string) string {
	host, _, err := net.SplitHostPort(given)
	bhost, bport, berr := net.SplitHostPort(bound)
	if err != nil || berr != nil || host == "" {
		return bound
	}
	if ip := net.ParseIP(bhost); ip != nil && ip.IsUnspecified() {
		return net.JoinHostPort(host, bport)
	}
	return bound
}

// Err delivers a fatal server error; it is closed when the server stops.
func (s *Server) Err() <-chan error { return s.errc }

// Close stops the server and removes a temporary data directory. It is
// safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.level.SetLevel(zapcore.PanicLevel)
		if s.port != nil {
			s.port.close()
		}
		if s.etcd != nil {
			if s.ready && s.peered {
				s.handOver()
			}
			if !s.ready || s.peered {
				// etcd's Close waits for its client servers, which wait
				// for the server to be ready or stopping: stop it first.
				// A member with peers has handed its leadership over
				// already, or given up: etcd's own hand-over in Close
				// waits up to 6 s (5 s + two elections) for a member
				// that, at a job's end, is stopping too.
				s.etcd.Server.HardStop()
			}
			s.etcd.Close()
		}
		if s.tempDir != "" {
			s.closeErr = os.RemoveAll(s.tempDir)
		}
		if s.runDir != "" {
			if err := os.RemoveAll(s.runDir); s.closeErr == nil {
				s.closeErr = err
			}
		}
	})
	return s.closeErr
}

// RaiseFileLimit raises this process's soft limit on open files to its
// hard limit and returns the soft limit now in force (0 if unknown).
func RaiseFileLimit() uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 0
	}
	if l.Cur < l.Max {
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: l.Max, Max: l.Max}) != nil {
			return l.Cur
		}
	}
	return l.Max
}
