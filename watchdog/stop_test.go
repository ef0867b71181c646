package watchdog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// countingSignal is a Signal that counts its calls.
type countingSignal struct{ calls int }

func (s *countingSignal) Set(context.Context, string, string) error { s.calls++; return nil }
func (s *countingSignal) Get(context.Context, string) (string, error) {
	s.calls++
	return "", errors.New("none")
}
func (s *countingSignal) Create(_ context.Context, _, v string) (string, error) {
	s.calls++
	return v, nil
}

// An operation that failed because its rank stopped (its error wraps
// ErrStopped) is a KindStopped, whether the watchdog finds it or a Wait
// reports it; one that failed otherwise is still a KindError. The
// handler reports a stop in one line that says so, and neither tells
// the other ranks, nor dumps, nor ends the process.
func TestStopIsNotAFailure(t *testing.T) {
	stopped := fmt.Errorf("comm: rank 1: all_reduce: %w: the process group was closed while it ran", ErrStopped)
	for _, tc := range []struct {
		name   string
		err    error
		report bool // through Report, as a Wait does
		kind   string
	}{
		{"stopped, seen by the watchdog", stopped, false, KindStopped},
		{"stopped, reported by a Wait", stopped, true, KindStopped},
		{"desync", errors.New("rank 0: message 3 of 64 bytes from rank 1, expected message 2 of 72 bytes (desync)"), false, KindError},
		{"peer closed", errors.New("rank 0: receive from rank 1: rank 1 closed its connection (it was stopped, or it exited)"), true, KindError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w, failures, stop := run(t, Config{Rank: 1, Recorder: NewRecorder(4)})
				defer stop()
				op := &fakeWork{}
				op.started.Store(true)
				op.err.Store(tc.err)
				watched := Op{State: op, RecordID: -1, Name: "all_reduce", Seq: 4, Created: time.Now(), Timeout: time.Minute}
				var f Failure
				if tc.report {
					w.Report(watched, tc.err)
					f = <-failures
				} else {
					w.Watch(watched)
					op.done.Store(true)
					f = <-failures
				}
				if f.Kind != tc.kind {
					t.Fatalf("kind %q; want %q (%s)", f.Kind, tc.kind, f)
				}
				var log bytes.Buffer
				sig := &countingSignal{}
				exited := -1
				h := &Handler{Rank: 1, WorldSize: 2, Recorder: NewRecorder(4), DumpDir: t.TempDir(), Mode: TearDown, Signal: sig,
					Exit: func(code int) { exited = code }, Log: &log, DumpWait: time.Second}
				h.Handle(f)
				if tc.kind == KindStopped {
					if sig.calls != 0 || exited != -1 || !strings.Contains(log.String(), "rank 1: stopped while collective all_reduce (group 0, sequence number 4) was in flight") ||
						strings.Contains(log.String(), "dumped") || strings.Contains(log.String(), "failed") {
						t.Errorf("a stop: %d store calls, exit %d, log:\n%s", sig.calls, exited, log.String())
					}
					return
				}
				if sig.calls == 0 || exited != ExitCollectiveError || !strings.Contains(log.String(), "failed: "+tc.err.Error()) {
					t.Errorf("a failure: %d store calls, exit %d, log:\n%s", sig.calls, exited, log.String())
				}
			})
		})
	}
}
