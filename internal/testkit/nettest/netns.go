package nettest

import (
	"errors"
	"testing"

	"github.com/gorun-dev/gorun/internal/sys/netns"
)

// Hosts are network namespaces standing for separate machines on one
// network (internal/sys/netns), removed when the test ends; Cut and Heal fail
// the test on an error. NewHosts skips the test, saying so, where they
// cannot be made (not root, no `ip`, refused).
type Hosts struct {
	*netns.Hosts
}

// NewHosts makes n hosts, 10.x.y.1 to 10.x.y.n, removed when the test
// ends.
func NewHosts(t testing.TB, n int) *Hosts {
	t.Helper()
	h, err := netns.New(n)
	if errors.Is(err, netns.ErrUnavailable) {
		t.Skip("SKIPPED: " + err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return &Hosts{h}
}

// Cut drops every packet to and from host i until Heal.
func (h *Hosts) Cut(t testing.TB, i int) {
	t.Helper()
	if err := h.Hosts.Cut(i); err != nil {
		t.Fatal(err)
	}
}

// Heal ends a Cut.
func (h *Hosts) Heal(t testing.TB, i int) {
	t.Helper()
	if err := h.Hosts.Heal(i); err != nil {
		t.Fatal(err)
	}
}
