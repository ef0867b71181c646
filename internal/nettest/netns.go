package nettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Hosts are network namespaces standing for separate machines on one
// network: each has its own address on a bridge in the test's namespace,
// and its link can be cut (its packets dropped, nothing refused or reset)
// and healed. They need root and `ip` (iproute2); NewHosts skips the test,
// saying so, where either is missing.
type Hosts struct {
	id     string
	subnet string // the first three octets, "10.x.y"
	n      int
}

// NewHosts makes n hosts, 10.x.y.1 to 10.x.y.n, removed when the test
// ends.
func NewHosts(t testing.TB, n int) *Hosts {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("SKIPPED: no `ip` (iproute2) for network namespaces")
	}
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	h := &Hosts{id: hex.EncodeToString(b), subnet: fmt.Sprintf("10.%d.%d", 100+int(b[0])%100, b[1]), n: n}
	t.Cleanup(h.remove)
	br := h.bridge()
	if out, err := run("link", "add", br, "type", "bridge"); err != nil {
		t.Skipf("SKIPPED: cannot make a bridge (%v): %s", err, out)
	}
	for _, args := range [][]string{{"addr", "add", h.subnet + ".254/24", "dev", br}, {"link", "set", br, "up"}} {
		if out, err := run(args...); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
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
					t.Skipf("SKIPPED: network namespaces refused (%v): %s", err, out)
				}
				t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
	}
	return h
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
func (h *Hosts) Cut(t testing.TB, i int) {
	t.Helper()
	if out, err := run("link", "set", h.link(i), "down"); err != nil {
		t.Fatalf("cut host %d: %v: %s", i, err, out)
	}
}

// Heal ends a Cut.
func (h *Hosts) Heal(t testing.TB, i int) {
	t.Helper()
	if out, err := run("link", "set", h.link(i), "up"); err != nil {
		t.Fatalf("heal host %d: %v: %s", i, err, out)
	}
}

func (h *Hosts) remove() {
	for i := range h.n {
		_, _ = run("netns", "del", h.Namespace(i))
		_, _ = run("link", "del", h.link(i))
	}
	_, _ = run("link", "del", h.bridge())
}

func run(args ...string) ([]byte, error) {
	return exec.Command("ip", args...).CombinedOutput()
}
