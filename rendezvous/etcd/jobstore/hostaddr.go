package jobstore

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"
)

// Host names in the store's addresses. Cluster schedulers name nodes by
// host name (Slurm's node list, a Kubernetes pod's stable name), and
// etcd binds only IP literals ("expected IP in URL for binding"): a name
// is resolved to the address it has on this host, and advertised as the
// name, so that the other nodes resolve it their own way.

// resolveTimeout bounds a name's look-up.
const resolveTimeout = 5 * time.Second

// hostView is how this machine sees names: what a name resolves to, which
// addresses are its own, and its own host name.
type hostView struct {
	lookup   func(ctx context.Context, host string) ([]net.IP, error)
	local    func() ([]net.IP, error)
	hostname func() (string, error)
}

// systemView is the machine's own resolver and interfaces.
func systemView() hostView {
	return hostView{
		lookup: func(ctx context.Context, host string) ([]net.IP, error) {
			return net.DefaultResolver.LookupIP(ctx, "ip", host)
		},
		local: func() ([]net.IP, error) {
			addrs, err := net.InterfaceAddrs()
			var ips []net.IP
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					ips = append(ips, n.IP)
				}
			}
			return ips, err
		},
		hostname: os.Hostname,
	}
}

// ListenAddress is the address to bind for hostport on this host.
// hostport itself when its host is an IP literal or empty; for a name,
// the first address of the name that belongs to this host and is not a
// loopback one; the unspecified address when the name is this machine's
// own and resolves only to loopback here (Debian's /etc/hosts maps the
// host's name to 127.0.1.1, where no other node reaches it); an error
// naming what the name resolves to when none of it is this host's.
func ListenAddress(ctx context.Context, hostport string) (string, error) {
	return systemView().listenAddress(ctx, hostport)
}

func (v hostView) listenAddress(ctx context.Context, hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", fmt.Errorf("address %q: %w", hostport, err)
	}
	if host == "" || net.ParseIP(host) != nil {
		return hostport, nil
	}
	ips, err := v.resolve(ctx, host)
	if err != nil {
		return "", err
	}
	local, err := v.local()
	if err != nil {
		return "", fmt.Errorf("this host's addresses: %w", err)
	}
	var loopback net.IP
	for _, ip := range ips {
		if !isOwn(local, ip) {
			continue
		}
		if !ip.IsLoopback() {
			return net.JoinHostPort(ip.String(), port), nil
		}
		if loopback == nil {
			loopback = ip
		}
	}
	if loopback == nil {
		return "", fmt.Errorf("%s resolves to %s here, none of which is an address of this host (its addresses: %s): give this node's own name or address", host, joinIPs(ips), joinIPs(local))
	}
	if name, err := v.hostname(); err == nil && strings.EqualFold(name, host) && hasNonLoopback(local) {
		return net.JoinHostPort("0.0.0.0", port), nil
	}
	return net.JoinHostPort(loopback.String(), port), nil
}

// SameHost reports whether host (a name or an IP literal, as found in an
// endpoint or a member list) is this node. localAddr is the node's
// --local-addr: when given, host is this node if it is the same text, or
// if both resolve to a common address, or if localAddr is this machine's
// own name and host is one of this machine's own, not loopback,
// addresses; when empty, host is this node if it is this machine's name,
// "localhost", or resolves to an address of this machine.
func SameHost(ctx context.Context, host, localAddr string) bool {
	return systemView().sameHost(ctx, host, localAddr)
}

func (v hostView) sameHost(ctx context.Context, host, localAddr string) bool {
	if host == "" {
		return false
	}
	if localAddr != "" && strings.EqualFold(host, localAddr) {
		return true
	}
	name, _ := v.hostname()
	if localAddr == "" && (host == "localhost" || strings.EqualFold(host, name)) {
		return true
	}
	hostIPs, err := v.resolve(ctx, host)
	if err != nil {
		return false
	}
	local, _ := v.local()
	if localAddr == "" {
		return slices.ContainsFunc(hostIPs, func(ip net.IP) bool { return isOwn(local, ip) })
	}
	localIPs, err := v.resolve(ctx, localAddr)
	if err != nil {
		return false
	}
	if slices.ContainsFunc(hostIPs, func(ip net.IP) bool { return containsIP(localIPs, ip) }) {
		return true
	}
	// --local-addr is this machine's name (Slurm's node name): a member
	// given as one of this machine's own addresses is this node's.
	if strings.EqualFold(localAddr, name) {
		return slices.ContainsFunc(hostIPs, func(ip net.IP) bool { return !ip.IsLoopback() && containsIP(local, ip) })
	}
	return false
}

// resolve looks host up (an IP literal is itself), bounded in time.
func (v hostView) resolve(ctx context.Context, host string) ([]net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	ips, err := v.lookup(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("look up host %q: %w", host, err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("look up host %q: no address", host)
	}
	return ips, nil
}

// isOwn reports whether ip is one of this host's addresses (local), or a
// loopback one (all of 127.0.0.0/8 is).
func isOwn(local []net.IP, ip net.IP) bool { return ip.IsLoopback() || containsIP(local, ip) }

func containsIP(ips []net.IP, ip net.IP) bool {
	return slices.ContainsFunc(ips, ip.Equal)
}

func hasNonLoopback(ips []net.IP) bool {
	return slices.ContainsFunc(ips, func(ip net.IP) bool { return !ip.IsLoopback() })
}

func joinIPs(ips []net.IP) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ", ")
}
