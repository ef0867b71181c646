package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// logLayout places the files of a run: with --log-dir, torchrun's layout
//
//	<log_dir>/<run_id>/attempt_<n>/<local_rank>/{stdout.log,stderr.log,error.json}
//
// and without it, a private temporary directory that holds only the error
// files and is removed when the run ends.
type logLayout struct {
	root string
	temp bool
}

// newLogLayout creates the run's directory. An existing <log_dir>/<run_id>
// from an earlier run is never overwritten: the new run gets the first free
// name among <run_id>.1, <run_id>.2, ...
func newLogLayout(logDir, runID string) (*logLayout, error) {
	if logDir == "" {
		dir, err := os.MkdirTemp("", "gorun-"+runID+"-")
		if err != nil {
			return nil, fmt.Errorf("create a directory for worker error files: %w", err)
		}
		return &logLayout{root: dir, temp: true}, nil
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("--log-dir: %w", err)
	}
	for i := 0; ; i++ {
		name := runID
		if i > 0 {
			name += "." + strconv.Itoa(i)
		}
		dir := filepath.Join(logDir, name)
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return &logLayout{root: dir}, nil
		}
		if !os.IsExist(err) {
			return nil, fmt.Errorf("--log-dir: %w", err)
		}
	}
}

// kept reports whether the files outlive the run.
func (l *logLayout) kept() bool { return !l.temp }

func (l *logLayout) rankDir(attempt, localRank int) string {
	return filepath.Join(l.root, "attempt_"+strconv.Itoa(attempt), strconv.Itoa(localRank))
}

// prepareAttempt creates attempt_<n>/<local_rank>/ for every local rank,
// removing what an earlier attempt with the same number left there.
func (l *logLayout) prepareAttempt(attempt, nproc int) error {
	dir := filepath.Join(l.root, "attempt_"+strconv.Itoa(attempt))
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	for lr := range nproc {
		if err := os.MkdirAll(l.rankDir(attempt, lr), 0o755); err != nil {
			return fmt.Errorf("create log directory: %w", err)
		}
	}
	return nil
}

// dumpDir is where an attempt's workers dump their flight recorders
// (GORUN_FR_DUMP_DIR): attempt_<n>/flight_recorder under --log-dir, else a
// folder per run of gorun and attempt in the temporary folder, which
// outlives the run (the temporary log layout does not).
func (l *logLayout) dumpDir(attempt int) string {
	if l.kept() {
		return filepath.Join(l.root, "attempt_"+strconv.Itoa(attempt), "flight_recorder")
	}
	return filepath.Join(os.TempDir(), "gorun-flight-recorder", filepath.Base(l.root), "attempt_"+strconv.Itoa(attempt))
}

// errorFile is a worker's TORCHELASTIC_ERROR_FILE.
func (l *logLayout) errorFile(attempt, localRank int) string {
	return filepath.Join(l.rankDir(attempt, localRank), "error.json")
}

// streamFile is the file of a worker's "stdout" or "stderr".
func (l *logLayout) streamFile(attempt, localRank int, stream string) string {
	return filepath.Join(l.rankDir(attempt, localRank), stream+".log")
}

// close removes a temporary layout; kept logs stay.
func (l *logLayout) close() error {
	if !l.temp {
		return nil
	}
	return os.RemoveAll(l.root)
}
