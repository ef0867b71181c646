package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/gorun-dev/gorun/rendezvous"
)

// TestFailedOutcomeCarriesExitCode: the outcome of a failed job carries
// the failing node's exit code to the other nodes, and an outcome without
// a usable code (a refusal, a stop, a forged or clipped value) gives 0.
func TestFailedOutcomeCarriesExitCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		outcome string
		want    int
	}{
		{"worker failure", failedOutcome("rank 1 on n1 exited with code 3", 3), 3},
		{"signal", failedOutcome("rank 0 on n0 was killed by SIGKILL", 137), 137},
		{"no code", failedOutcome("node n2 cannot join the job: ...", 0), 0},
		{"code out of range", "failed: exit code 300: x", 0},
		{"not a number", "failed: exit code x3: x", 0},
		{"no colon", "failed: exit code 3", 0},
		{"old form", "failed: rank 1 exited with code 3", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := outcomeErr(tt.outcome)
			var jf *rendezvous.JobFailure
			if !errors.Is(err, rendezvous.ErrJobFailed) || !errors.As(err, &jf) {
				t.Fatalf("outcomeErr(%q) = %v; want a JobFailure", tt.outcome, err)
			}
			if jf.ExitCode != tt.want || jf.Outcome != tt.outcome {
				t.Errorf("outcomeErr(%q) = %+v; want exit code %d", tt.outcome, *jf, tt.want)
			}
		})
	}
}

// TestLeaseGoneIsNotUnreachable: a lease etcd no longer knows (revoked,
// or a store restarted empty) is an etcd failure that says so, not
// "etcd unreachable".
func TestLeaseGoneIsNotUnreachable(t *testing.T) {
	t.Parallel()
	err := etcdFailure(rpctypes.ErrLeaseNotFound)
	if !errors.Is(err, errEtcd) || !errors.Is(err, rpctypes.ErrLeaseNotFound) || strings.Contains(err.Error(), "unreachable") ||
		!strings.Contains(err.Error(), "lease is gone") {
		t.Errorf("etcdFailure(lease not found) = %v", err)
	}
	if err := etcdFailure(context.DeadlineExceeded); !errors.Is(err, errEtcd) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("etcdFailure(deadline) = %v", err)
	}
}
