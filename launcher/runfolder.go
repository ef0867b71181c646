package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gorun-dev/gorun/launcher/probe"
)

// The readers of a run folder, beside the code that writes it (logdir.go,
// eventlog.go, progressfile.go): gorun report, gorun trace and the
// benchmarks find what they read through these.

// FindRunFolder returns dir when it holds an events file, else the folder
// in it whose events file was modified last (picked true).
func FindRunFolder(dir string) (run string, picked bool, err error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return "", false, fmt.Errorf("LOGDIR: %w", err)
	}
	if !fi.IsDir() {
		return "", false, fmt.Errorf("LOGDIR %s is not a folder; want a run folder (with %s) or a --log-dir", dir, EventsFile)
	}
	if isRegular(filepath.Join(dir, EventsFile)) {
		return dir, false, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", false, fmt.Errorf("LOGDIR: %w", err)
	}
	var latest time.Time
	for _, e := range entries { // in name order: of equal times, the last name wins
		if !e.IsDir() {
			continue
		}
		fi, err := os.Lstat(filepath.Join(dir, e.Name(), EventsFile))
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if run == "" || !fi.ModTime().Before(latest) {
			run, latest = filepath.Join(dir, e.Name()), fi.ModTime()
		}
	}
	if run == "" {
		return "", false, fmt.Errorf("LOGDIR %s holds no %s, nor does any folder in it; want a run folder (<log_dir>/<run_id>) or a --log-dir of a run", dir, EventsFile)
	}
	return run, true, nil
}

// isRegular reports whether path is a regular file (not a link to one).
func isRegular(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular()
}

// RunningProgress reads, in the run folder run, the progress files of the
// attempt that runs (a spawn without its end, in a timeline without an
// exit), merged over its workers, else their probes' last snapshots; nil
// when none runs. A progress file it
// cannot read is left out and returned among the warnings.
func RunningProgress(run string, events []Event) (_ map[int]Progress, warnings []error) {
	attempt, open := 0, false
	for _, e := range events {
		switch e.Kind {
		case EventSpawn:
			attempt, open = e.Attempt, true
		case EventEnd, EventExit:
			open = false
		}
	}
	if !open {
		return nil, nil
	}
	dir := AttemptDir(run, attempt)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			warnings = append(warnings, err)
		}
		return nil, warnings
	}
	var ps, probed []Progress
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		// A script that knows nothing of gorun writes no progress file:
		// its probe's last snapshot counts its optimizer steps.
		if s, ok, err := probe.Read(filepath.Join(dir, e.Name(), probe.SnapshotFile)); err == nil && ok {
			probed = append(probed, probeProgress(s))
		}
		p, err := ReadProgress(filepath.Join(dir, e.Name(), ProgressFile))
		if err != nil {
			warnings = append(warnings, err)
			continue
		}
		ps = append(ps, p)
	}
	p, _ := workersProgress(ps, probed)
	return map[int]Progress{attempt: p}, warnings
}
