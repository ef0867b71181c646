// Package netns makes network namespaces that stand for separate machines
// on one network, for the tests (internal/testkit/nettest wraps it) and for
// `gorun bench recovery`'s network cut: each host has its own address on
// a bridge in the caller's namespace, and its link can be cut (its
// packets dropped, nothing refused or reset) and healed. It needs root
// and `ip` (iproute2).
package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// ErrUnavailable is a machine where namespaces cannot be made here: not
// root, no `ip`, or the kernel refused.
var ErrUnavailable = errors.New("network namespaces unavailable")

// Hosts are n hosts, 10.x.y.1 to 10.x.y.n.
type Hosts struct {
	id     string
	subnet string // the first three octets, "10.x.y"
	n      int
}

// New makes n hosts; Close removes them. An error wrapping
// ErrUnavailable says why none can be made here.
func New(n int) (*Hosts, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: they need root", ErrUnavailable)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("%w: no `ip` (iproute2)", ErrUnavailable)
	}
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	h := &Hosts{id: hex.EncodeToString(b), subnet: fmt.Sprintf("10.%d.%d", 100+int(b[0])%100, b[1]), n: n}
	br := h.bridge()
	if out, err := run("link", "add", br, "type", "bridge"); err != nil {
		return nil, fmt.Errorf("%w: cannot make a bridge (%v): %s", ErrUnavailable, err, out)
	}
	fail := func(err error) (*Hosts, error) {
		h.Close()
		return nil, err
	}
	for _, args := range [][]string{{"addr", "add", h.subnet + ".254/24", "dev", br}, {"link", "set", br, "up"}} {
		if out, err := run(args...); err != nil {
			return fail(fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out))
		}
	}
	for i := range n {
		ns, outer := h.Namespace(i), h.link(i)
		for _, args := range [][]string{
			{"netns", "add", ns},
			{"link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"link", "set", outer, "master", br},
			{"link", "set", outer, "up"},
			{"-n", ns, "addr", "add", h.Addr(i) + "/24", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		} {
			if out, err := run(args...); err != nil {
				if i == 0 && args[0] == "netns" {
					return fail(fmt.Errorf("%w: refused (%v): %s", ErrUnavailable, err, out))
				}
				return fail(fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out))
			}
		}
	}
	return h, nil
}

// Addr is host i's address.
func (h *Hosts) Addr(i int) string { return fmt.Sprintf("%s.%d", h.subnet, i+1) }

// Namespace is host i's network namespace.
func (h *Hosts) Namespace(i int) string { return fmt.Sprintf("gorun-%s-%d", h.id, i) }

func (h *Hosts) bridge() string    { return "grb" + h.id }
func (h *Hosts) link(i int) string { return fmt.Sprintf("grv%s%d", h.id, i) }

// Command is argv run on host i: in its network namespace and nothing
// else. nsenter (util-linux) enters that namespace alone; `ip netns exec`,
// used where nsenter is missing, also mounts a /sys of its own, which
// hides the cgroup file system (gorun then has no job cgroup there).
func (h *Hosts) Command(ctx context.Context, i int, argv ...string) *exec.Cmd {
	if nsenter, err := exec.LookPath("nsenter"); err == nil {
		return exec.CommandContext(ctx, nsenter, append([]string{"--net=/run/netns/" + h.Namespace(i), "--"}, argv...)...)
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Namespace(i)}, argv...)...)
}

// Cut drops every packet to and from host i until Heal.
func (h *Hosts) Cut(i int) error {
	if out, err := run("link", "set", h.link(i), "down"); err != nil {
		return fmt.Errorf("cut host %d: %v: %s", i, err, out)
	}
	return nil
}

// Heal ends a Cut.
func (h *Hosts) Heal(i int) error {
	if out, err := run("link", "set", h.link(i), "up"); err != nil {
		return fmt.Errorf("heal host %d: %v: %s", i, err, out)
	}
	return nil
}

// Close removes the hosts.
func (h *Hosts) Close() {
	for i := range h.n {
		_, _ = run("netns", "del", h.Namespace(i))
		_, _ = run("link", "del", h.link(i))
	}
	_, _ = run("link", "del", h.bridge())
}

func run(args ...string) ([]byte, error) {
	return exec.Command("ip", args...).CombinedOutput()
}
