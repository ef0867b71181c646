package launcher

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/internal/sys/tempdir"
	"github.com/gorun-dev/gorun/rendezvous"
)

// File modes of what gorun writes: private to the user.
const (
	dirMode  = 0o700
	fileMode = 0o600
)

// logLayout places the files of a run: with --log-dir, torchrun's layout
//
//	<log_dir>/<run_id>_<random>/attempt_<n>/<local_rank>/{stdout.log,stderr.log,error.json}
//
// and without it, a private temporary folder (internal/sys/tempdir) that holds
// only the error files and is removed when the run ends. The run's folder
// is always one this run made (mode 0700); everything gorun makes in it
// goes through dir, a handle on that folder, so that renaming the folder
// or planting links cannot redirect gorun's writes and removals.
type logLayout struct {
	root string
	dir  *os.Root
	temp *tempdir.Dir // nil with --log-dir: the files outlive the run
	// attempts are the attempt folders this run made: the only ones it
	// may remove.
	attempts map[int]bool
	// frBase is the per-user folder of flight-recorder dumps of runs
	// without --log-dir, once made.
	frBase string
}

// newLogLayout creates the run's folder, <log_dir>/<run_id>_<random> as
// torchrun names it: a folder of an earlier run, or one planted under a
// name, is never used.
func newLogLayout(logDir, runID string) (*logLayout, error) {
	if err := rendezvous.ValidateRunID(runID); err != nil {
		return nil, err
	}
	l := &logLayout{attempts: map[int]bool{}}
	if logDir == "" {
		d, err := tempdir.Make("", tempdir.Prefix+runID+"-*")
		if err != nil {
			return nil, fmt.Errorf("create a folder for worker error files: %w", err)
		}
		l.root, l.temp = d.Path(), d
	} else {
		real, err := ResolveLogDir(logDir)
		if err != nil {
			return nil, err
		}
		logDir = real
		if err := private.MkdirAll(logDir, 0o755); err != nil {
			return nil, setting.Errorf("%s: %w", setting.Name("LogDir"), err)
		}
		if err := CheckLogDir(logDir); err != nil {
			return nil, err
		}
		// torchrun's <run_id>_<random>: a new folder (0700) for every run,
		// never one already there.
		dir, err := os.MkdirTemp(logDir, runID+"_*") // the random part last, whatever the id holds
		if err != nil {
			return nil, setting.Errorf("%s: %w", setting.Name("LogDir"), err)
		}
		l.root = dir
	}
	dir, err := openOwnRoot(l.root)
	if err != nil {
		if l.kept() {
			os.Remove(l.root) // empty: made just now
		}
		l.close()
		return nil, fmt.Errorf("log folder: %w", err)
	}
	l.dir = dir
	return l, nil
}

// ResolveLogDir returns the folder that --log-dir=dir names as the
// kernel resolves it (a ".." after a link leads out of the link's
// target, not back where the text says), once CheckLogDir accepted it.
// gorun and its workers use that one path from then on: a path checked
// one way and used another would put the run's folder where nobody
// checked. A part of it not there yet is made by gorun later.
func ResolveLogDir(dir string) (string, error) {
	raw := dir
	if !filepath.IsAbs(raw) {
		wd, err := os.Getwd()
		if err != nil {
			return "", setting.Errorf("%s: %w", setting.Name("LogDir"), err)
		}
		raw = wd + "/" + raw // not filepath.Join, which drops ".." by the text
	}
	parts := strings.Split(raw, "/")
	// The links on the path as written (CheckLogDir reads it by the
	// text, which is the kernel's way only without "..").
	if !slices.Contains(parts, "..") {
		if err := CheckLogDir(raw); err != nil {
			return "", err
		}
	}
	for i := len(parts); i > 0; i-- {
		prefix := strings.Join(parts[:i], "/")
		real, err := filepath.EvalSymlinks(cmp.Or(prefix, "/"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", setting.Errorf("%s=%q: %w", setting.Name("LogDir"), dir, err)
		}
		real = filepath.Join(append([]string{real}, parts[i:]...)...)
		if err := CheckLogDir(real); err != nil {
			return "", err
		}
		return real, nil
	}
	return "", setting.Errorf("%s=%q: no part of it exists", setting.Name("LogDir"), dir)
}

// CheckLogDir refuses a --log-dir in which another user could rename or
// replace the run's folder, there or above it: a folder on its path owned
// by another user (root aside), or one that others may write to without
// the sticky bit (/tmp has it), or a link on the path owned by another
// user (who could point it elsewhere while the job runs). The workers
// read and write under the run's folder by its path. Folders not there
// yet are made by gorun, and are its own.
func CheckLogDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return setting.Errorf("%s: %w", setting.Name("LogDir"), err)
	}
	// The links on the path as written.
	existing := "/"
	for _, part := range strings.Split(strings.TrimPrefix(abs, "/"), "/") {
		p := filepath.Join(existing, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return setting.Errorf("%s: %w", setting.Name("LogDir"), err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if uid, ok := owner(fi); ok && uid != os.Getuid() && uid != 0 {
				return setting.Errorf("%s=%q: %s is a link owned by %s, who could point it elsewhere while the job runs; use a path without it", setting.Name("LogDir"), dir, p, private.UserName(uid))
			}
		}
		existing = p
	}
	// The folders the path leads to, from the root down.
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return setting.Errorf("%s: %w", setting.Name("LogDir"), err)
	}
	p := "/"
	for _, part := range append([]string{""}, strings.Split(strings.TrimPrefix(real, "/"), "/")...) {
		p = filepath.Join(p, part)
		fi, err := os.Stat(p)
		if err != nil {
			return setting.Errorf("%s: %w", setting.Name("LogDir"), err)
		}
		uid, ok := owner(fi)
		switch {
		case !ok:
		case uid != os.Getuid() && uid != 0:
			return setting.Errorf("%s=%q: %s belongs to %s, who could replace the run's folder while the job runs; use a folder of your own", setting.Name("LogDir"), dir, p, private.UserName(uid))
		case fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0:
			return setting.Errorf("%s=%q: other users may write to %s (mode %04o, no sticky bit) and could replace the run's folder while the job runs; use a folder only you can write to, or one with the sticky bit (as /tmp)", setting.Name("LogDir"), dir, p, fi.Mode().Perm())
		}
	}
	return nil
}

// owner is the user that owns the file of fi.
func owner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// openOwnRoot opens the folder this process just made at path, checking
// that what it opened is that folder: not a link put in its place, owned
// by this user, private.
func openOwnRoot(path string) (*os.Root, error) {
	li, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	r, err := os.OpenRoot(path)
	if err != nil {
		return nil, err
	}
	fi, err := r.Stat(".")
	st, _ := li.Sys().(*syscall.Stat_t)
	switch {
	case err != nil:
	case !li.IsDir() || !os.SameFile(li, fi):
		err = fmt.Errorf("%s was replaced while gorun made it", path)
	case st == nil || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o077 != 0:
		err = fmt.Errorf("%s is not a private folder of this user", path)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// kept reports whether the files outlive the run.
func (l *logLayout) kept() bool { return l.temp == nil }

// FlightRecorderFolder is the name of an attempt's flight-recorder folder
// under --log-dir: <run>/attempt_<n>/flight_recorder.
const FlightRecorderFolder = "flight_recorder"

// rankName is a rank's folder, relative to the run's.
func rankName(attempt, localRank int) string {
	return filepath.Join(goodput.AttemptName(attempt), strconv.Itoa(localRank))
}

func (l *logLayout) rankDir(attempt, localRank int) string {
	return filepath.Join(l.root, rankName(attempt, localRank))
}

// prepareAttempt creates attempt_<n>/<local_rank>/ for every local rank
// (mode 0700). An attempt folder that this run made earlier (a round
// that ended by a membership change keeps its attempt number) is emptied
// first; one that this run did not make is never removed.
func (l *logLayout) prepareAttempt(attempt, nproc int) error {
	name := goodput.AttemptName(attempt)
	if l.attempts[attempt] {
		// A membership change reruns the attempt in a new round: with
		// --log-dir the earlier round's files are kept beside it, as
		// attempt_<n>.rerun_<k>; the temporary layout only held error
		// files, read already.
		var err error
		if l.kept() {
			err = l.keepRerun(name)
		} else {
			err = l.dir.RemoveAll(name)
		}
		if err != nil {
			return fmt.Errorf("clear %s: %w", filepath.Join(l.root, name), err)
		}
	}
	if err := l.dir.Mkdir(name, dirMode); err != nil {
		return fmt.Errorf("create log folder: %w", err)
	}
	l.attempts[attempt] = true
	for lr := range nproc {
		if err := l.dir.Mkdir(rankName(attempt, lr), dirMode); err != nil {
			return fmt.Errorf("create log folder: %w", err)
		}
	}
	return nil
}

// dumpDir is where an attempt's workers dump their flight recorders
// (GORUN_FR_DUMP_DIR): attempt_<n>/flight_recorder under --log-dir, else
// <per-user folder>/<run folder>/attempt_<n>, which outlives the run (the
// temporary layout does not). The per-user folder is made private (0700)
// on first use; if another user holds its name, a fresh private folder
// is made instead and the warning says so. The watchdog makes the
// attempt's folder when it dumps; close removes those that stayed empty.
func (l *logLayout) dumpDir(attempt int) (dir, warning string, err error) {
	if l.kept() {
		return filepath.Join(l.root, goodput.AttemptName(attempt), FlightRecorderFolder), "", nil
	}
	if l.frBase == "" {
		if l.frBase, warning, err = l.makeDumpBase(); err != nil {
			return "", warning, fmt.Errorf("flight recorder folder: %w", err)
		}
	}
	return filepath.Join(l.frBase, filepath.Base(l.root), goodput.AttemptName(attempt)), warning, nil
}

// makeDumpBase makes the per-user flight-recorder folder (or a fresh one)
// and this run's folder in it.
func (l *logLayout) makeDumpBase() (base, warning string, err error) {
	run := filepath.Base(l.root)
	for range 3 {
		if base, warning, err = private.FlightRecorderDir(); err != nil {
			return "", "", err
		}
		err = os.Mkdir(filepath.Join(base, run), dirMode)
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
		// Another gorun removed the per-user folder, empty, meanwhile.
	}
	return base, warning, err
}

// errorFile is a worker's TORCHELASTIC_ERROR_FILE.
func (l *logLayout) errorFile(attempt, localRank int) string {
	return filepath.Join(l.rankDir(attempt, localRank), "error.json")
}

// streamFile is the path of a worker's "stdout" or "stderr" log.
func (l *logLayout) streamFile(attempt, localRank int, stream string) string {
	return filepath.Join(l.rankDir(attempt, localRank), stream+".log")
}

// createStream creates a worker's "stdout" or "stderr" log (mode 0600):
// a new file, never one that is already there, nor a link.
func (l *logLayout) createStream(attempt, localRank int, stream string) (*os.File, error) {
	name := filepath.Join(rankName(attempt, localRank), stream+".log")
	return l.dir.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fileMode)
}

// createAttemptFile creates a file of attempt n's own (mode 0600), beside
// its local ranks' folders: a new file, never one already there, nor a
// link.
func (l *logLayout) createAttemptFile(attempt int, name string) (*os.File, error) {
	return l.dir.OpenFile(filepath.Join(goodput.AttemptName(attempt), name), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fileMode)
}

// close removes a temporary layout, and the flight-recorder folders of
// its attempts that stayed empty; kept logs stay.
func (l *logLayout) close() error {
	if l.dir != nil {
		l.dir.Close()
	}
	if l.temp == nil {
		return nil
	}
	if l.frBase != "" {
		l.removeEmptyDumpFolders()
	}
	return l.temp.Remove()
}

// removeEmptyDumpFolders removes this run's flight-recorder folders
// that stayed empty, through handles on checked folders (a link or a
// folder of another user's is left alone), and only empty folders.
func (l *logLayout) removeEmptyDumpFolders() {
	base, err := private.OpenOwnFolder(l.frBase)
	if err != nil {
		return
	}
	defer base.Close()
	name := filepath.Base(l.root)
	if run, err := base.Sub(name); err == nil {
		for a := range l.attempts {
			_ = run.RemoveEmpty(goodput.AttemptName(a))
		}
		run.Close()
	}
	_ = base.RemoveEmpty(name)
	// The per-user folder too, when no run keeps dumps there (rmdir:
	// only an empty folder, never a link). Should another user take the
	// name meanwhile, the next run is warned and uses a fresh folder,
	// and the sweep leaves theirs alone.
	_ = syscall.Rmdir(l.frBase)
}

// stopFile is the path of the run's stop file (GORUN_STOP_FILE).
func (l *logLayout) stopFile() string { return filepath.Join(l.root, stopFileName) }

// markPlainStop creates the plain-stop mark beside the stop file (see
// stopFiles).
func (l *logLayout) markPlainStop() error {
	f, err := l.dir.OpenFile(stopFileName+plainStopSuffix, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, fileMode)
	if err != nil {
		return err
	}
	return f.Close()
}

// clearPlainStop removes the plain-stop mark, if there is one.
func (l *logLayout) clearPlainStop() error {
	if err := l.dir.Remove(stopFileName + plainStopSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// createStopFile creates the run's stop file with content (mode 0600);
// os.ErrExist when it is there already.
func (l *logLayout) createStopFile(content string) error {
	f, err := l.dir.OpenFile(stopFileName, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fileMode)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	return errors.Join(err, f.Close())
}

// unrequestedStop says, with an error, that the run's stop file is there
// although no stop request was made (the caller knows): a file that
// gorun did not create, on which the workers' helpers stop and exit 0,
// must not turn a job cut short into a success.
func (l *logLayout) unrequestedStop() error {
	if _, err := l.dir.Lstat(stopFileName); err != nil {
		return nil
	}
	return fmt.Errorf("the workers exited 0, but the stop file %s is there and no stop was requested: gorun did not create it, and the workers may have stopped early on it (a worker's gorun_preempt stops at it); the job is not reported a success", l.stopFile())
}

// keepRerun moves the folder name of an attempt that runs again to the
// first free attempt_<n>.rerun_<k>.
func (l *logLayout) keepRerun(name string) error {
	for k := 1; ; k++ {
		dst := name + ".rerun_" + strconv.Itoa(k)
		if _, err := l.dir.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
			return l.dir.Rename(name, dst)
		}
	}
}
