package ctxtime

import (
	"context"
	"errors"
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
