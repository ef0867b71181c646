package goodput

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gorun-dev/gorun/internal/setting"
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
		return "", false, setting.Errorf("LOGDIR %s is not a folder; want a run folder (with %s) or a %s", dir, EventsFile, setting.Name("LogDir"))
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
		return "", false, setting.Errorf("LOGDIR %s holds no %s, nor does any folder in it; want a run folder (<log_dir>/<run_id>) or a %s of a run", dir, EventsFile, setting.Name("LogDir"))
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
			probed = append(probed, ProbeProgress(s))
		}
		p, err := ReadProgress(filepath.Join(dir, e.Name(), ProgressFile))
		if err != nil {
			warnings = append(warnings, err)
			continue
		}
		ps = append(ps, p)
	}
	p, _ := WorkersProgress(ps, probed)
	return map[int]Progress{attempt: p}, warnings
}

// probeProgress is a worker's progress as its probe counted the
// optimizer steps (Seen false without a step: PyTorch 1.x has no global
// step hook).
func ProbeProgress(s probe.Snapshot) Progress {
	if !s.StepHook || s.Steps == 0 || s.FirstStepNs == 0 || len(s.StepTimesNs) == 0 {
		return Progress{}
	}
	return Progress{Seen: true, FirstStep: 1, Step: int(s.Steps),
		FirstTime: time.Unix(0, s.FirstStepNs), Time: time.Unix(0, s.StepTimesNs[len(s.StepTimesNs)-1])}
}

// AttemptName is attempt n's folder, relative to the run's.
func AttemptName(n int) string { return AttemptPrefix + strconv.Itoa(n) }

// AttemptPrefix starts the name of an attempt's folder.
const AttemptPrefix = "attempt_"

// AttemptDir is attempt n's folder in the run folder run:
// <run>/attempt_<n>, for the run folder's readers (gorun report).
func AttemptDir(run string, n int) string { return filepath.Join(run, AttemptName(n)) }

// ParseAttemptName reads the name of an attempt's folder, attempt_<n>,
// for the run folder's readers (gorun trace).
func ParseAttemptName(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, AttemptPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0
}
