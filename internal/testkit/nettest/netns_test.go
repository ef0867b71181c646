package nettest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestHostsCutAndHeal: a closed port of a reachable host refuses a
// connection at once; cut, the host does not answer at all; healed, it
// refuses again.
func TestHostsCutAndHeal(t *testing.T) {
	h := NewHosts(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	try := func() string {
		out, _ := h.Command(ctx, 0, "timeout", "2", "bash", "-c", "echo > /dev/tcp/"+h.Addr(1)+"/7001 && echo open || echo closed").CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	// Nothing listens on 7001: a reachable host refuses at once.
	if got := try(); !strings.Contains(got, "refused") && !strings.Contains(got, "closed") {
		t.Fatalf("reachable host: %q; want a refusal", got)
	}
	h.Cut(t, 1)
	if got := try(); strings.Contains(got, "refused") || strings.Contains(got, "open") {
		t.Fatalf("cut host: %q; want no answer", got)
	}
	h.Heal(t, 1)
	if got := try(); !strings.Contains(got, "refused") && !strings.Contains(got, "closed") {
		t.Fatalf("healed host: %q; want a refusal again", got)
	}
}
