package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"strings"
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
	if node.MasterPort != 0 {
		port = node.MasterPort // bound by the agent: cfg.MasterPort, or one of its own
	}
	if port == 0 {
		if port, err = FreePort(l.cfg.MasterAddr); err != nil {
			return Round{}, err
		}
	}
	r := Round{
		RunID:          l.cfg.RunID,
		Number:         n,
		RestartCount:   restarts,
		MasterAddr:     l.cfg.MasterAddr,
		MasterPort:     port,
		StoreEndpoints: l.cfg.StoreEndpoints,
		StorePrefix:    l.roundPrefix(n),
		StoreUser:      l.cfg.StoreUser, StorePassword: l.cfg.StorePassword,
	}
	r.Place(0, Uniform(1, node.LocalWorldSize, node.Role))
	return r, nil
}

// AgentStorePort is the port the agent's store binds: --master-port, or
// 0 for a free one.
func (l *Local) AgentStorePort() int { return l.cfg.MasterPort }

// roundPrefix is round n's key prefix in the store, or "" without one.
func (l *Local) roundPrefix(n int) string {
	if len(l.cfg.StoreEndpoints) == 0 {
		return ""
	}
	return l.cfg.StorePrefix + strconv.Itoa(n) + "/"
}

// FreePort returns a TCP port for a job's master (its TCPStore): one free
// on every address of this host, for addr is only where the workers
// reach it and PyTorch's TCPStore binds the wildcard ([::] and 0.0.0.0).
// The port is released before FreePort returns, so that a worker can
// bind it. It is drawn at random outside the kernel's ephemeral range
// (ip_local_port_range), from which every outgoing connection takes its
// local port: a port from there, free when probed, was often taken by a
// connection (gloo's, etcd's) by the time rank 0 bound it, seconds later
// (EADDRINUSE). Only when no port outside the range is free does the
// kernel pick one. It uses the socket calls directly: the launch path
// stays clear of the net package's start-up.
func FreePort(addr string) (int, error) {
	low, high := ephemeralRange()
	for range 64 {
		p := outsideRange(low, high)
		if p == 0 {
			break
		}
		if free, err := bindWildcard(p); err != nil {
			return 0, fmt.Errorf("rendezvous: find a free port for %s: %w", addr, err)
		} else if free {
			return p, nil
		}
	}
	return kernelPort(addr)
}

// The lowest port FreePort draws: below it lie many services' fixed
// ports.
const minDrawnPort = 10000

// ephemeralRange reads the kernel's ip_local_port_range (Linux's default
// 32768-60999 when it cannot be read).
func ephemeralRange() (low, high int) {
	low, high = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return low, high
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return low, high
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l > h {
		return low, high
	}
	return l, h
}

// outsideRange draws a port in [minDrawnPort, 65535] outside [low, high]
// (0 if there is none).
func outsideRange(low, high int) int {
	below := max(0, low-minDrawnPort)                // minDrawnPort .. low-1
	above := max(0, 65535-max(high, minDrawnPort-1)) // high+1 .. 65535
	if below+above == 0 {
		return 0
	}
	n := rand.IntN(below + above)
	if n < below {
		return minDrawnPort + n
	}
	return max(high, minDrawnPort-1) + 1 + (n - below)
}

// bindWildcard reports whether port is free on every address: bound on
// [::] for both families, or on 0.0.0.0 where the host has no IPv6.
func bindWildcard(port int) (bool, error) {
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	var sa syscall.Sockaddr = &syscall.SockaddrInet6{Port: port}
	if err != nil {
		if fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0); err != nil {
			return false, err
		}
		sa = &syscall.SockaddrInet4{Port: port}
	} else if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 0); err != nil {
		syscall.Close(fd)
		return false, err
	}
	defer syscall.Close(fd)
	switch err := syscall.Bind(fd, sa); {
	case err == nil:
		return true, nil
	case errors.Is(err, syscall.EADDRINUSE), errors.Is(err, syscall.EACCES):
		return false, nil
	default:
		return false, err
	}
}

// kernelPort asks the kernel for an ephemeral port free on addr (an IP
// address, or a host name, for which every IPv4 address is probed).
func kernelPort(addr string) (int, error) {
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
