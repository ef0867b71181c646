package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/gorun-dev/gorun/rendezvous"
)

// TestOutcomeRecords: an outcome read back from its record gives Next
// the error it stands for, the failing node's exit code with a failure,
// and the words logs and gorun stop show.
func TestOutcomeRecords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		o    outcomeRecord
		is   error
		code int
		text string
	}{
		{"worker failure", failedOutcome(2, "rank 1 on n1 exited with code 3", 3), rendezvous.ErrJobFailed, 3, "failed (exit code 3): rank 1 on n1 exited with code 3"},
		{"signal", failedOutcome(0, "rank 0 on n0 was killed by SIGKILL", 137), rendezvous.ErrJobFailed, 137, "failed (exit code 137): rank 0 on n0 was killed by SIGKILL"},
		{"no code", failedOutcome(0, "node n2 cannot join the job: ...", 0), rendezvous.ErrJobFailed, 0, "failed: node n2 cannot join the job: ..."},
		{"stopped", failedOutcome(1, "stopped: SIGTERM on n0", 0), rendezvous.ErrJobFailed, 0, "stopped: SIGTERM on n0"},
		{"succeeded", outcomeRecord{How: outcomeSucceeded, Round: 4}, rendezvous.ErrJobSucceeded, 0, "succeeded in round 4"},
		{"preempted", outcomeRecord{How: outcomePreempted, Round: 1, Reason: "SIGUSR1 on n0"}, rendezvous.ErrPreempted, 0, "preempted in round 1: SIGUSR1 on n0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o outcomeRecord
			if err := decodeRecord([]byte(encodeRecord(kindOutcome, tt.o)), kindOutcome, &o); err != nil || o != tt.o || !o.valid() {
				t.Fatalf("%+v reads back as %+v, %v (valid %v)", tt.o, o, err, o.valid())
			}
			err := outcomeErr(&o)
			if !errors.Is(err, tt.is) {
				t.Errorf("outcomeErr = %v; want %v", err, tt.is)
			}
			var jf *rendezvous.JobFailure
			if errors.As(err, &jf) != (tt.is == rendezvous.ErrJobFailed) || (jf != nil && jf.ExitCode != tt.code) {
				t.Errorf("outcomeErr = %#v; want exit code %d", err, tt.code)
			}
			if o.String() != tt.text {
				t.Errorf("%q; want %q", o.String(), tt.text)
			}
		})
	}
	for _, bad := range []outcomeRecord{{How: "won"}, {How: outcomeFailed, ExitCode: 300}, {How: outcomeSucceeded, Round: -1}} {
		if bad.valid() {
			t.Errorf("%+v is valid; want it refused", bad)
		}
	}
}

// TestRecordsOfAnotherVersionAreRefusedByName: a record of another
// version, or of another kind than its key holds, is refused with the
// version or the kinds named; the version is a type of its own, so that
// the control keys keep such a record rather than mend it.
func TestRecordsOfAnotherVersionAreRefusedByName(t *testing.T) {
	t.Parallel()
	var n int
	err := decodeRecord([]byte(`{"v":2,"kind":"round_counter","data":3}`), kindRoundCounter, &n)
	var v *recordVersionError
	if !errors.As(err, &v) || v.Version != 2 || !strings.Contains(err.Error(), "version 2") || !strings.Contains(err.Error(), "reads version 1") {
		t.Errorf("a record of version 2: %v; want a refusal naming versions 2 and 1", err)
	}
	if err := decodeRecord([]byte(`{"v":1,"kind":"restarts","data":3}`), kindRoundCounter, &n); err == nil || !strings.Contains(err.Error(), `"restarts" record where a "round_counter" record belongs`) {
		t.Errorf("a record of another kind: %v", err)
	}
	for _, old := range []string{"3", "failed: exit code 3: rank 1", "g b rb rw"} {
		if err := decodeRecord([]byte(old), kindRoundCounter, &n); err == nil || errors.As(err, &v) || !strings.Contains(err.Error(), "not a record of gorun's") {
			t.Errorf("%q: %v; want it refused as not a record", old, err)
		}
	}
	if err := decodeRecord([]byte(encodeRecord(kindRoundCounter, 7)), kindRoundCounter, &n); err != nil || n != 7 {
		t.Errorf("a round counter of 7 reads back as %d, %v", n, err)
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
