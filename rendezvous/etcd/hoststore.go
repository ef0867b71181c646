package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/internal/sys/tempdir"
	"github.com/gorun-dev/gorun/rendezvous"
)

// storeHostsEnv lists the embedded store's member hosts, separated by
// commas (--rdzv-conf store_hosts separates them with '+', as its own
// pairs are separated by commas).
const storeHostsEnv = "GORUN_RDZV_STORE_HOSTS"

// storeMember is one member of the job's embedded store: the address its
// clients use, and its peers' (the next port).
type storeMember struct{ client, peer string }

// storeMembers reads the embedded store's members: the hosts c gives
// (--rdzv-conf store_hosts, GORUN_RDZV_STORE_HOSTS), else the scheduler's
// (spec.StoreHosts). Each is a host or host:port, the port defaulting to
// defPort (the endpoint's); the peers listen on the port after it. nil
// means a store of one member, at the endpoint.
func storeMembers(c Conf, spec rendezvous.Spec, defPort int) ([]storeMember, error) {
	hosts, source := c.storeHosts, c.storeHostsFrom
	switch {
	case hosts != nil:
	case len(spec.StoreHosts) > 0:
		hosts, source = spec.StoreHosts, "the scheduler's host list"
	default:
		return nil, nil
	}
	if n := len(hosts); n < 3 || n%2 == 0 || n > 7 {
		return nil, fmt.Errorf("%s: %d hosts; want 3, 5 or 7 (a store of n members survives the loss of (n-1)/2 of them; 1 or 2 survive none)", source, n)
	}
	members := make([]storeMember, len(hosts))
	seen := map[string]bool{}
	for i, h := range hosts {
		host, port, err := rendezvous.SplitEndpoint(strings.TrimSpace(h), defPort)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		if port >= 65535 {
			return nil, fmt.Errorf("%s: %q: the port after %d (the members' peer port) does not exist", source, h, port)
		}
		client := net.JoinHostPort(host, strconv.Itoa(port))
		if seen[client] {
			return nil, fmt.Errorf("%s: %s twice", source, client)
		}
		seen[client] = true
		members[i] = storeMember{client: client, peer: net.JoinHostPort(host, strconv.Itoa(port+1))}
	}
	return members, nil
}

// memberIndex returns the member this node hosts, -1 for none.
func memberIndex(ctx context.Context, members []storeMember, localAddr string) int {
	for i, m := range members {
		if isLocal(ctx, m.client, localAddr) {
			return i
		}
	}
	return -1
}

// storeServer is this node's part of the embedded store.
type storeServer interface{ Close() error }

// hostStore starts this node's part of the embedded store: the single
// member at endpoint, in this process, or member `member` of members, in
// a companion process (startMember). A single member whose port another
// agent on this host has bound is left to that agent (taken is true)
// unless is_host=true insisted.
func hostStore(ctx context.Context, c Conf, token Token, endpoint string, members []storeMember, member int, grows bool, log logrus.FieldLogger) (server storeServer, taken bool, err error) {
	if members != nil {
		log.Infof("hosting member %d of the job's store at %s; it serves once a majority of its %d members run (%s)", member, members[member].client, len(members), strings.Join(clients(members), ","))
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
	cfg := ServerConfig{ClientAddr: endpoint, Dir: dir.Path(), Token: token, AuthPrefix: c.prefix, LogLevel: c.storeLogLevel,
		CertFile: c.tls.CertFile, KeyFile: c.tls.KeyFile, TrustedCAFile: c.tls.TrustedCAFile}
	if grows {
		// Members join it later, at its peer port: the endpoint's next
		// when free (a firewall opened for the store), else another.
		cfg.Growable = true
		host, port, _ := net.SplitHostPort(endpoint)
		p, _ := strconv.Atoi(port)
		if _, cfg.PeerAddr, err = memberPorts(ctx, host, p); err != nil {
			_ = dir.Remove()
			return nil, false, fmt.Errorf("host the embedded store at --rdzv-endpoint %s: %w", endpoint, err)
		}
	}
	s, err := StartServer(ctx, cfg)
	if err != nil {
		_ = dir.Remove()
	}
	switch {
	case err != nil && c.isHost == nil && errors.Is(err, syscall.EADDRINUSE):
		return nil, true, nil // another agent bound it first
	case err != nil && errors.Is(err, syscall.EADDRINUSE) && othersPort(endpoint) != nil:
		return nil, false, othersPort(endpoint)
	case err != nil:
		return nil, false, fmt.Errorf("host the embedded store at --rdzv-endpoint %s: %w", endpoint, err)
	}
	tlsNote := map[bool]string{true: ", TLS", false: ""}[c.tls.CertFile != ""]
	log.Infof("hosting the job's embedded etcd at %s (authentication on%s)", endpoint, tlsNote)
	return &sweptServer{Server: s, dir: dir}, false, nil
}

// sweptServer is a store whose data folder is removed after it stops.
type sweptServer struct {
	*Server
	dir *tempdir.Dir
}

// Close stops the store, then removes its data.
func (s *sweptServer) Close() error {
	err := s.Server.Close()
	if rerr := s.dir.Remove(); err == nil && rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = rerr
	}
	return err
}

// clients lists the members' client addresses.
func clients(members []storeMember) []string {
	var out []string
	for _, m := range members {
		out = append(out, m.client)
	}
	return out
}
