package ctxtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("a sleep that ran out: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("a sleep whose context ended: %v, want context.Canceled", err)
	}
	if time.Since(start) > time.Minute {
		t.Error("the sleep did not end with its context")
	}
}

// TestPoll: Poll returns once cond holds, an error naming the limit once
// it passed, and the context's error once it ended.
func TestPoll(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name     string
		ctx      context.Context
		holdsAt  int // the call at which cond holds; 0: never
		limit    time.Duration
		wantErr  error
		wantCall int // at least this many calls
	}{
		{"holds at once", context.Background(), 1, time.Hour, nil, 1},
		{"holds at the third look", context.Background(), 3, time.Hour, nil, 3},
		{"never, past the limit", context.Background(), 0, 10 * time.Millisecond, errLimit, 1},
		{"never, the context ended", ended, 0, time.Hour, context.Canceled, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := Poll(tc.ctx, time.Millisecond, tc.limit, func() bool {
				calls++
				return tc.holdsAt > 0 && calls >= tc.holdsAt
			})
			switch {
			case tc.wantErr == nil && err != nil, tc.wantErr == errLimit && (err == nil || !strings.Contains(err.Error(), "not within")),
				tc.wantErr == context.Canceled && !errors.Is(err, context.Canceled):
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if calls < tc.wantCall {
				t.Errorf("%d calls, want at least %d", calls, tc.wantCall)
			}
		})
	}
}

// errLimit stands for Poll's error past its limit in TestPoll.
var errLimit = errors.New("not within the limit")
