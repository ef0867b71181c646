package launcher

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
)

// sharedStop is a local rendezvous with a store that shares stop
// requests: requests are delivered at once, but recording one blocks
// until release closes, so another node's request (delivered) arrives
// before this node's own is recorded.
type sharedStop struct {
	*rendezvous.Local
	requests  chan rendezvous.StopRequest
	release   chan struct{}
	requested atomic.Bool
}

// SucceedStopped is the store's outcome: preempted once a request is
// recorded.
func (s *sharedStop) SucceedStopped(ctx context.Context, round rendezvous.Round) error {
	if s.requested.Load() {
		return rendezvous.ErrPreempted
	}
	return s.Local.Succeed(ctx, round)
}

func (s *sharedStop) RequestStop(ctx context.Context, req rendezvous.StopRequest) error {
	s.requested.Store(true)
	select {
	case s.requests <- req:
	default:
	}
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *sharedStop) WatchStop(ctx context.Context) <-chan rendezvous.StopRequest {
	out := make(chan rendezvous.StopRequest, 1)
	go func() {
		defer close(out)
		select {
		case req := <-s.requests:
			out <- req
		case <-ctx.Done():
		}
	}()
	return out
}

// TestPreemptStoreRequestBeforeOwn: SIGTERM makes this node's request,
// and the store's copy arrives while this node's is still being recorded:
// the workers are told once, they exit 0 on the file, and the run is
// preempted (exit 75). Both the store's request and the end of the
// recording reach the monitor; neither may tell twice nor break the
// other. (When the store's copy came before the recording goroutine had
// even started, gorun once closed a dropped channel and crashed; that
// ordering is not forced here: TestElasticLateJoinerScalesUp met it under
// load.)
func TestPreemptStoreRequestBeforeOwn(t *testing.T) {
	t.Parallel()
	cfg, _, _ := shellConfig(t, 2, `trap 'exit 0' TERM; echo $$ > $DIR/ready.$RANK; while [ ! -e "$GORUN_STOP_FILE" ]; do sleep 0.02; done; echo seen > $DIR/seen.$RANK; exit 0`)
	cfg.PreemptWorkerSignal = 0 // the file only: the workers must see it
	dir := dirOf(cfg)
	rdzv := &sharedStop{Local: rendezvous.NewLocal(rendezvous.LocalConfig{RunID: "test"}), requests: make(chan rendezvous.StopRequest, 1), release: make(chan struct{})}
	sigs := make(chan os.Signal, 1)
	done := runUntilReady(t, cfg, rdzv, sigs, 2)
	sigs <- syscall.SIGTERM
	// The store's request tells the workers while the recording blocks.
	waitFor(t, "the workers to see the stop file", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "seen.*"))
		return len(m) == 2
	})
	close(rdzv.release)
	if res := <-done; res.ExitCode != ExitPreempted || !res.Preempted {
		t.Fatalf("Run = %+v; want exit %d, preempted", res, ExitPreempted)
	}
}

// TestPreemptRepeatedSignalIsTheSameRequest: a scheduler that sends
// SIGTERM twice, milliseconds apart (Slurm's slurmd at a time limit or a
// preemption without GraceTime), makes one stop request: the workers save
// and the run ends preempted (75), not stopped at once (143).
func TestPreemptRepeatedSignalIsTheSameRequest(t *testing.T) {
	t.Parallel()
	cfg, _, stderr := shellConfig(t, 2, `trap 'saving=1' TERM; echo $$ > $DIR/ready.$RANK; while [ ! -e "$GORUN_STOP_FILE" ]; do sleep 0.02; done; sleep 0.3; exit 0`)
	sigs := make(chan os.Signal, 2)
	done := runUntilReady(t, cfg, rendezvous.NewLocal(rendezvous.LocalConfig{RunID: "test"}), sigs, 2)
	sigs <- syscall.SIGTERM
	sigs <- syscall.SIGTERM
	if res := <-done; res.ExitCode != ExitPreempted || !res.Preempted {
		t.Fatalf("Run = %+v; want exit %d, preempted\n%s", res, ExitPreempted, stderr)
	}
	if !strings.Contains(stderr.String(), "again within 1s: the same stop request") {
		t.Errorf("the repeat is not named as such:\n%s", stderr)
	}
}

// TestPreemptSignalRepeatWindow: the same preempt signal within the
// window repeats the request; later, or another signal, is a second one.
func TestPreemptSignalRepeatWindow(t *testing.T) {
	t.Parallel()
	cfg := &Config{PreemptGrace: time.Second, PreemptSignals: []syscall.Signal{syscall.SIGTERM, syscall.SIGUSR1}}
	p := &preemptor{cfg: cfg, signalled: true, firstSignal: syscall.SIGTERM, firstAt: time.Now()}
	if !p.isPreemptSignal(syscall.SIGTERM) {
		t.Error("SIGTERM again at once: not taken as the same request")
	}
	if p.isPreemptSignal(syscall.SIGUSR1) {
		t.Error("SIGUSR1 after SIGTERM: taken as the same request")
	}
	p.firstAt = time.Now().Add(-signalRepeatWindow)
	if p.isPreemptSignal(syscall.SIGTERM) {
		t.Errorf("SIGTERM again after %v: taken as the same request", signalRepeatWindow)
	}
}

// runUntilReady runs an agent of cfg in the background and waits until
// its n workers wrote $DIR/ready.<rank>; the agent's result comes on the
// returned channel.
func runUntilReady(t *testing.T, cfg Config, rdzv Rendezvous, sigs chan os.Signal, n int) <-chan Result {
	t.Helper()
	a, err := NewAgent(cfg, rdzv, sigs)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan Result, 1)
	go func() {
		res, _ := a.Run(context.Background())
		done <- res
	}()
	dir := dirOf(cfg)
	waitFor(t, "workers ready", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "ready.*"))
		return len(m) == n
	})
	return done
}
