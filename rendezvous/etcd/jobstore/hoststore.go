package jobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/tempdir"
	"github.com/gorun-dev/gorun/rendezvous"
)

// HostConfig is what a node's part of the job's store takes from the
// node's --rdzv-conf.
type HostConfig struct {
	// Prefix is the key prefix the job's user may use (etcd_prefix).
	Prefix string
	// LogLevel is etcd's log level (store_log_level).
	LogLevel string
	// TLS holds the user's TLS files (cacert, cert, key), if any: the
	// store then serves etcd's own TLS with them.
	TLS transport.TLSInfo
	// ReadyTimeout bounds a member's wait for a majority of the store's
	// members to run (connect_timeout).
	ReadyTimeout time.Duration
	// IsHostSet says is_host was given: a single member's port that
	// another agent has bound is then an error, not that agent's store.
	IsHostSet bool
}

// Member is one member of the job's embedded store: the address its
// clients use, and its peers' (the next port).
type Member struct{ Client, Peer string }

// ParseMembers reads the embedded store's member hosts (source names
// them, for messages: --rdzv-conf store_hosts, GORUN_RDZV_STORE_HOSTS or
// the scheduler's host list). Each is a host or host:port, the port
// defaulting to defPort (the endpoint's); the peers listen on the port
// after it. A store has 3, 5 or 7 members.
func ParseMembers(hosts []string, source any, defPort int) ([]Member, error) {
	if n := len(hosts); n < 3 || n%2 == 0 || n > 7 {
		return nil, setting.Errorf("%s: %d hosts; want 3, 5 or 7 (a store of n members survives the loss of (n-1)/2 of them; 1 or 2 survive none)", source, n)
	}
	members := make([]Member, len(hosts))
	seen := map[string]bool{}
	for i, h := range hosts {
		host, port, err := rendezvous.SplitEndpoint(strings.TrimSpace(h), defPort)
		if err != nil {
			return nil, setting.Errorf("%s: %w", source, err)
		}
		if port >= 65535 {
			return nil, setting.Errorf("%s: %q: the port after %d (the members' peer port) does not exist", source, h, port)
		}
		client := net.JoinHostPort(host, strconv.Itoa(port))
		if seen[client] {
			return nil, fmt.Errorf("%s: %s twice", source, client)
		}
		seen[client] = true
		members[i] = Member{Client: client, Peer: net.JoinHostPort(host, strconv.Itoa(port+1))}
	}
	return members, nil
}

// HostStore starts this node's part of the embedded store: the single
// member at endpoint, in this process (a *SweptServer; grows: one that
// other members may join later), or member `member` of members, in a
// companion process (a *MemberProcess); nil when that member's place was
// given away (this node is then a client of the others). A single member
// whose port another agent on this host has bound is left to that agent
// (taken is true) unless is_host insisted (c.IsHostSet).
func HostStore(ctx context.Context, c HostConfig, token rendezvous.Token, endpoint string, members []Member, member int, grows bool, log logrus.FieldLogger) (server io.Closer, taken bool, err error) {
	if members != nil {
		log.Infof("hosting member %d of the job's store at %s; it serves once a majority of its %d members run (%s)", member, members[member].Client, len(members), strings.Join(Clients(members), ","))
		m, err := startMember(ctx, c, token, members, member, log)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, false, err
		case err != nil && !errors.Is(err, ErrMemberTaken):
			return nil, false, err
		case err != nil:
			// A node that comes back after its agent was lost finds its
			// member's place taken by the one it had ("already
			// bootstrapped"): the store went on without it. The others
			// still serve, and the node is a client of them.
			log.Warnf("%v: joining the job as a client of the other members", err)
			return nil, false, nil
		}
		return m, false, nil
	}
	// The data lives in a locked temporary folder: if Slurm's SIGKILL
	// (or the OOM killer) ends this agent, the next gorun sweeps it.
	dir, err := tempdir.New("store")
	if err != nil {
		return nil, false, fmt.Errorf("host the embedded store: data folder: %w", err)
	}
	cfg := ServerConfig{ClientAddr: endpoint, Dir: dir.Path(), Token: token, AuthPrefix: c.Prefix, LogLevel: c.LogLevel,
		CertFile: c.TLS.CertFile, KeyFile: c.TLS.KeyFile, TrustedCAFile: c.TLS.TrustedCAFile}
	if grows {
		// Members join it later, at its peer port: the endpoint's next
		// when free (a firewall opened for the store), else another.
		cfg.Growable = true
		host, port, _ := net.SplitHostPort(endpoint)
		p, _ := strconv.Atoi(port)
		if _, cfg.PeerAddr, err = MemberPorts(ctx, host, p); err != nil {
			_ = dir.Remove()
			return nil, false, setting.Errorf("host the embedded store at %s %s: %w", setting.Name("Endpoint"), endpoint, err)
		}
	}
	s, err := StartServer(ctx, cfg)
	if err != nil {
		_ = dir.Remove()
	}
	switch {
	case err != nil && !c.IsHostSet && errors.Is(err, syscall.EADDRINUSE):
		return nil, true, nil // another agent bound it first
	case err != nil && errors.Is(err, syscall.EADDRINUSE) && OthersPort(endpoint) != nil:
		return nil, false, OthersPort(endpoint)
	case err != nil:
		return nil, false, setting.Errorf("host the embedded store at %s %s: %w", setting.Name("Endpoint"), endpoint, err)
	}
	tlsNote := map[bool]string{true: ", TLS", false: ""}[c.TLS.CertFile != ""]
	log.Infof("hosting the job's embedded etcd at %s (authentication on%s)", endpoint, tlsNote)
	return &SweptServer{Server: s, dir: dir}, false, nil
}

// SweptServer is a store of one member hosted in this process
// (HostStore), whose data folder is removed after it stops.
type SweptServer struct {
	*Server
	dir *tempdir.Dir
}

// Close stops the store, then removes its data.
func (s *SweptServer) Close() error {
	err := s.Server.Close()
	if rerr := s.dir.Remove(); err == nil && rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = rerr
	}
	return err
}

// Clients lists the members' client addresses.
func Clients(members []Member) []string {
	var out []string
	for _, m := range members {
		out = append(out, m.Client)
	}
	return out
}
