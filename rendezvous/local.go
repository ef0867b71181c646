package rendezvous

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"syscall"
)

// DefaultLocalAddr is the master address of a single-node job.
const DefaultLocalAddr = "127.0.0.1"

// LocalConfig configures a Local rendezvous.
type LocalConfig struct {
	// RunID is the job id reported in every round.
	RunID string
	// MasterAddr is the address worker rank 0 listens on. Empty means
	// DefaultLocalAddr.
	MasterAddr string
	// MasterPort, when not 0, is used for every round. When 0, each round
	// gets a port that the kernel reports free on MasterAddr.
	MasterPort int
	// MaxRestarts is the restart budget (--max-restarts).
	MaxRestarts int
	// StoreEndpoints, when set, is a store that the workers reach (the
	// embedded etcd of --standalone); each round gets its own prefix
	// under StorePrefix.
	StoreEndpoints []string
	StorePrefix    string
	// StoreUser and StorePassword log in to that store.
	StoreUser, StorePassword string
}

// Local is the rendezvous of a job that runs on one node. It needs no
// store and no network peer: each round has exactly one member. It is safe
// for concurrent use.
type Local struct {
	counter
	cfg LocalConfig
}

// NewLocal returns a single-node rendezvous.
func NewLocal(cfg LocalConfig) *Local {
	if cfg.MasterAddr == "" {
		cfg.MasterAddr = DefaultLocalAddr
	}
	return &Local{cfg: cfg, counter: counter{maxRestarts: max(cfg.MaxRestarts, 0)}}
}

// Next closes the next round at once: the node is group rank 0 of 1, and
// the master port is cfg.MasterPort or a free port on the master address.
func (l *Local) Next(ctx context.Context, node Node) (Round, error) {
	if err := node.Validate(); err != nil {
		return Round{}, err
	}
	if err := ctx.Err(); err != nil {
		return Round{}, err
	}
	n, restarts, err := l.nextRound()
	if err != nil {
		return Round{}, err
	}
	port := l.cfg.MasterPort
	if port == 0 {
		if port, err = FreePort(l.cfg.MasterAddr); err != nil {
			return Round{}, err
		}
	}
	return Round{
		RunID:          l.cfg.RunID,
		Number:         n,
		RestartCount:   restarts,
		GroupWorldSize: 1,
		WorldSize:      node.LocalWorldSize,
		RoleWorldSize:  node.LocalWorldSize,
		MasterAddr:     l.cfg.MasterAddr,
		MasterPort:     port,
		StoreEndpoints: l.cfg.StoreEndpoints,
		StorePrefix:    l.roundPrefix(n),
		StoreUser:      l.cfg.StoreUser, StorePassword: l.cfg.StorePassword,
	}, nil
}

// roundPrefix is round n's key prefix in the store, or "" without one.
func (l *Local) roundPrefix(n int) string {
	if len(l.cfg.StoreEndpoints) == 0 {
		return ""
	}
	return l.cfg.StorePrefix + strconv.Itoa(n) + "/"
}

// FreePort asks the kernel for a TCP port that is free on addr (an IP
// address, or a host name, for which every IPv4 address is probed) and
// returns it. The port is released before FreePort returns,
// so that a worker can bind it; the kernel hands out ephemeral ports so
// that two concurrent callers very unlikely get the same one, unlike a
// fixed default such as torchrun's 29500. It uses the socket calls
// directly: the launch path stays clear of the net package's start-up.
func FreePort(addr string) (int, error) {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		// A host name: a port free on every IPv4 address is free on its.
		ip = netip.IPv4Unspecified()
	}
	family := syscall.AF_INET6
	var sa syscall.Sockaddr
	if ip.Is4() {
		family, sa = syscall.AF_INET, &syscall.SockaddrInet4{Addr: ip.As4()}
	} else {
		sa = &syscall.SockaddrInet6{Addr: ip.As16()}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("rendezvous: find a free port on %s: %w", addr, err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, sa); err != nil {
		return 0, fmt.Errorf("rendezvous: find a free port on %s: %w", addr, err)
	}
	got, err := syscall.Getsockname(fd)
	if err != nil {
		return 0, fmt.Errorf("rendezvous: find a free port on %s: %w", addr, err)
	}
	switch a := got.(type) {
	case *syscall.SockaddrInet4:
		return a.Port, nil
	case *syscall.SockaddrInet6:
		return a.Port, nil
	}
	return 0, fmt.Errorf("rendezvous: find a free port on %s: unexpected socket address %T", addr, got)
}
