package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestRetryOverload: a call etcd refuses for too many requests is asked
// again (as one etcd timed out) until it passes or the limit ends; any other error ends it at once.
func TestRetryOverload(t *testing.T) {
	other := errors.New("permission denied")
	cases := []struct {
		name      string
		answers   []error // what each call returns; the last repeats
		limit     time.Duration
		wantCalls int
		want      error
	}{
		{"passes after two refusals", []error{rpctypes.ErrTooManyRequests, rpctypes.ErrTooManyRequests, nil}, time.Minute, 3, nil},
		{"another error at once", []error{other}, time.Minute, 1, other},
		{"refused past the limit", []error{rpctypes.ErrTooManyRequests}, 0, 1, rpctypes.ErrTooManyRequests},
		{"passes at once", []error{nil}, time.Minute, 1, nil},
		{"passes after a timeout", []error{rpctypes.ErrTimeout, nil}, time.Minute, 2, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := RetryOverload(context.Background(), tc.limit, func() error {
				calls++
				return tc.answers[min(calls, len(tc.answers))-1]
			})
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) || calls != tc.wantCalls {
				t.Errorf("err %v after %d calls; want %v after %d", err, calls, tc.want, tc.wantCalls)
			}
		})
	}
}
