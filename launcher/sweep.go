package launcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/cgroup"
	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/internal/sys/tempdir"
)

// sweepWait bounds how long a run that ends waits for its sweep to
// finish before it stops it (a short job still cleans up).
const sweepWait = 2 * time.Second

// sweeper is an agent's background sweep of the temporary folders that
// killed gorun processes left (tempdir.Sweep). The agent starts it once
// its first workers are forked, so that it costs the launch nothing, and
// stops it, waiting for it, before Run returns.
type sweeper struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startSweep starts the sweep unless it already ran in this Run.
func (a *Agent) startSweep(ctx context.Context) {
	if a.sweep != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &sweeper{cancel: cancel, done: make(chan struct{})}
	a.sweep = s
	log := a.cfg.Log
	go func() {
		defer close(s.done)
		removed, err := tempdir.Sweep(ctx, os.TempDir())
		if err := sweepDumpFolders(ctx, private.FlightRecorderBase(), os.TempDir()); err != nil {
			log.Warnf("%v", err)
		}
		if own, cerr := cgroup.Own(); cerr == nil {
			removed = append(removed, sweepJobCgroups(own)...)
		}
		for _, p := range removed {
			log.Infof("removed %s, left by a gorun that was killed", p)
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			log.Warnf("remove temporary folders left by killed gorun processes: %v", err)
		}
	}()
}

// stopSweep lets the sweep, if one runs, finish for up to sweepWait, then
// stops it; it returns once the sweep has ended.
func (a *Agent) stopSweep() {
	s := a.sweep
	if s == nil {
		return
	}
	a.sweep = nil
	defer s.cancel()
	if ctxtime.SleepUnless(s.done, sweepWait) {
		s.cancel()
		<-s.done
	}
}

// sweepDumpFolders removes, in base (the per-user flight-recorder
// folder), the run folders that stayed empty but for empty attempt
// folders and whose run's temporary folder in tmp is gone: a killed
// gorun's. A folder with a dump in it is kept. It works through handles
// on folders it checked: a base that is a link, or that another user
// owns or may write to, is refused (the error says why), as is every
// folder in it that is a link or not this user's; and it only ever
// removes empty folders, never a file.
func sweepDumpFolders(ctx context.Context, base, tmp string) error {
	d, err := private.OpenOwnFolder(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("not sweeping the flight-recorder folder: %w", err)
	}
	defer d.Close()
	entries, err := d.Entries()
	if err != nil {
		return err
	}
	for _, e := range entries {
		if ctx.Err() != nil {
			return nil
		}
		if !e.IsDir() || !strings.HasPrefix(e.Name(), tempdir.Prefix) {
			continue
		}
		if _, err := os.Lstat(filepath.Join(tmp, e.Name())); err == nil {
			continue // its gorun lives, or has not removed it yet
		}
		run, err := d.Sub(e.Name())
		if err != nil {
			continue // a link, or not this user's: left alone
		}
		attempts, _ := run.Entries()
		for _, a := range attempts {
			_ = run.RemoveEmpty(a.Name()) // only an empty folder
		}
		run.Close()
		_ = d.RemoveEmpty(e.Name())
	}
	return nil
}
