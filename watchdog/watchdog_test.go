package watchdog

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeWork is an operation whose progress the test sets.
type fakeWork struct {
	started, done atomic.Bool
	err           atomic.Value
}

func (f *fakeWork) Started() bool     { return f.started.Load() }
func (f *fakeWork) IsCompleted() bool { return f.done.Load() }
func (f *fakeWork) Err() error {
	if e, ok := f.err.Load().(error); ok {
		return e
	}
	return nil
}

// run starts a watchdog in the bubble and returns its failures' channel
// and a stop function that waits for it.
func run(t *testing.T, cfg Config) (*Watchdog, chan Failure, func()) {
	failures := make(chan Failure, 1)
	cfg.OnFailure = func(f Failure) { failures <- f }
	w := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	return w, failures, func() { cancel(); <-done }
}

func TestTimeoutIsReportedWithinAnInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := NewRecorder(10)
		w, failures, stop := run(t, Config{Rank: 2, Recorder: rec})
		defer stop()
		start := time.Now()
		hung := &fakeWork{}
		hung.started.Store(true)
		id := rec.Record(Entry{PGID: 0, CollectiveSeqID: 7, ProfilingName: "gorun:all_reduce"}, start)
		w.Watch(Op{State: hung, RecordID: id, Name: "all_reduce", Seq: 7, Created: start, Timeout: 3 * time.Second})
		f := <-failures
		took := time.Since(start)
		if f.Kind != KindTimeout || f.Rank != 2 || f.Seq != 7 || f.Op != "all_reduce" {
			t.Errorf("failure %+v", f)
		}
		if took <= 3*time.Second || took > 3*time.Second+DefaultInterval {
			t.Errorf("reported after %v; want within one interval after the 3 s timeout", took)
		}
		e := rec.Dump(2, 4, "test", time.Now()).Entries[0]
		if e.State != StateStarted || !e.Retired || e.TimeDiscoveredCompletedNs != nil {
			t.Errorf("entry %+v: want started, retired, not completed", e)
		}
	})
}

func TestCompletedAndFailedOperations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := NewRecorder(10)
		rec.AddGroup(0, "default_pg", "world", []int{0, 1})
		w, failures, stop := run(t, Config{Recorder: rec})
		defer stop()
		ok := &fakeWork{}
		id := rec.Record(Entry{CollectiveSeqID: 0}, time.Now())
		w.Watch(Op{State: ok, RecordID: id, Name: "broadcast", Created: time.Now(), Timeout: time.Minute})
		ok.started.Store(true)
		time.Sleep(250 * time.Millisecond)
		ok.done.Store(true)
		time.Sleep(DefaultInterval)
		synctest.Wait()
		if w.InFlight() != 0 {
			t.Errorf("%d in flight after completion", w.InFlight())
		}
		d := rec.Dump(0, 2, "test", time.Now())
		e := d.Entries[0]
		if e.State != StateCompleted || !e.Retired || e.DurationMs == nil || *e.DurationMs < 200 {
			t.Errorf("entry %+v", e)
		}
		if st := d.PGStatus["0"]; st.LastEnqueued != 0 || st.LastStarted != 0 || st.LastCompleted != 0 {
			t.Errorf("pg_status %+v", st)
		}
		bad := &fakeWork{}
		bad.err.Store(errors.New("peer gone"))
		bad.done.Store(true)
		w.Watch(Op{State: bad, RecordID: -1, Name: "all_gather", Seq: 1, Created: time.Now(), Timeout: time.Minute})
		if f := <-failures; f.Kind != KindError || f.Err != "peer gone" || f.Seq != 1 {
			t.Errorf("failure %+v", f)
		}
	})
}

// A watchdog that stops looking (here: stuck asking an operation whether
// it started) is found by the heartbeat monitor.
func TestHeartbeatMonitorFindsAStuckWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, _, stop := run(t, Config{})
		release := make(chan struct{})
		w.Watch(Op{State: &blockingWork{release: release}, RecordID: -1, Created: time.Now(), Timeout: time.Hour})
		stuck := make(chan Failure, 1)
		start := time.Now()
		go MonitorHeartbeat(context.Background(), w, 2*time.Second, func(f Failure) { stuck <- f })
		f := <-stuck
		if f.Kind != KindStuck || time.Since(start) > 4*time.Second {
			t.Errorf("%+v after %v", f, time.Since(start))
		}
		close(release)
		stop()
	})
}

type blockingWork struct{ release chan struct{} }

func (b *blockingWork) Started() bool     { <-b.release; return true }
func (b *blockingWork) IsCompleted() bool { return false }
func (b *blockingWork) Err() error        { return nil }

// A healthy watchdog keeps its heartbeat moving: the monitor stays quiet.
func TestHeartbeatMonitorQuietWhileHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, _, stop := run(t, Config{})
		defer stop()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		MonitorHeartbeat(ctx, w, time.Second, func(f Failure) { t.Errorf("stuck: %+v", f) })
	})
}
