// Package tracefind finds the flight-recorder dumps below a folder, the
// way gorun lays them out:
//
//	<log-dir>/<run_id>_<random>/attempt_<n>/flight_recorder/fr_trace_rank_<rank>.json
//
// (or <tmp>/gorun-flight-recorder-<uid>/<run>/attempt_<n>/ without --log-dir),
// so that `gorun trace` can be given the log folder a user knows rather
// than the dump folder gorun chose. The search never leaves the folder it
// is given: a symbolic link whose target lies outside it is refused, and
// the search goes at most MaxDepth folders down.
package tracefind

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/launcher"
	"github.com/gorun-dev/gorun/watchdog"
)

// DefaultMaxDepth is how many folders below the given one the search
// reads: enough for <log-dir>/<run_id>_<random>/attempt_<n>/flight_recorder (3)
// given the folder above the log folder.
const DefaultMaxDepth = 4

// ErrNoDumps means no flight-recorder dump was found.
var ErrNoDumps = errors.New("no flight recorder dumps")

// notFound is ErrNoDumps with the folder searched and what was looked for.
type notFound struct{ msg string }

func (e *notFound) Error() string { return e.msg }
func (e *notFound) Unwrap() error { return ErrNoDumps }

// Options tune a search.
type Options struct {
	// MaxDepth bounds how many folders below the root are read (0:
	// DefaultMaxDepth).
	MaxDepth int
}

// Attempt is one folder of dumps: in gorun's layout, one attempt of one
// run.
type Attempt struct {
	// Run is the run's folder name (<run_id>, or <run_id>.<k> for a later
	// run with the same id); "" when the folder is not in gorun's layout.
	Run string `json:"run,omitempty"`
	// Number is the n of attempt_<n>, or -1 outside gorun's layout.
	Number int `json:"attempt"`
	// Dir is the folder holding the dumps, under the root as given.
	Dir string `json:"dir"`
	// Dumps are the dump files, by name.
	Dumps []string `json:"-"`
	// Newest is the newest dump's modification time.
	Newest time.Time `json:"-"`
}

// Name says which run and attempt the dumps belong to, or where they are.
func (a Attempt) Name() string {
	if a.Number < 0 {
		return "dumps in " + a.Dir
	}
	return fmt.Sprintf("run %s attempt %d", a.Run, a.Number)
}

// Read reads the attempt's dumps, ordered by rank.
func (a Attempt) Read() ([]watchdog.Dump, error) {
	dumps, err := watchdog.ReadDumpFiles(a.Dumps)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	return dumps, nil
}

// Result is what a search found.
type Result struct {
	// Root is the folder searched, as given.
	Root string
	// Attempts are the folders with dumps, oldest run first and, within a
	// run, by attempt number; the last is the latest.
	Attempts []Attempt
	// Refused are the symbolic links not followed because they lead
	// outside Root, as "link -> target".
	Refused []string
}

// Direct reports whether the root itself holds the dumps (and nothing
// below it does): what `gorun trace` was first given.
func (r Result) Direct() bool {
	return len(r.Attempts) == 1 && r.Attempts[0].Dir == r.Root
}

// Latest is the latest attempt with dumps.
func (r Result) Latest() Attempt { return r.Attempts[len(r.Attempts)-1] }

// Find searches root and the folders below it, MaxDepth deep, for
// flight-recorder dumps. It fails with ErrNoDumps, naming the folder and
// what it looked for, when there are none.
func Find(root string, opts Options) (Result, error) {
	depth := opts.MaxDepth
	if depth <= 0 {
		depth = DefaultMaxDepth
	}
	res := Result{Root: root}
	fi, err := os.Stat(root)
	if err != nil {
		return res, fmt.Errorf("trace: %w", err)
	}
	if !fi.IsDir() {
		return res, fmt.Errorf("trace: %s is not a folder: give the folder of the dumps or a log folder above it", root)
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return res, fmt.Errorf("trace: %w", err)
	}
	if real, err = filepath.Abs(real); err != nil {
		return res, fmt.Errorf("trace: %w", err)
	}
	s := &search{realRoot: real, maxDepth: depth, seen: map[string]bool{}, res: &res}
	s.walk(root, real, 0)
	if len(res.Attempts) == 0 {
		msg := fmt.Sprintf("trace: %v (fr_trace_rank_<rank>.json) in %s nor in its folders up to %d levels below; gorun writes them to <log-dir>/<run_id>_<random>/attempt_<n>/flight_recorder/ (with --log-dir) or %s/<run>/attempt_<n>/",
			ErrNoDumps, root, depth, private.FlightRecorderBase())
		if len(res.Refused) > 0 {
			msg += fmt.Sprintf("; not followed, leading outside %s: %s", root, strings.Join(res.Refused, ", "))
		}
		return res, &notFound{msg}
	}
	order(res.Attempts)
	return res, nil
}

// search is one Find's state.
type search struct {
	realRoot string
	maxDepth int
	// seen holds the real paths of the folders read, so that a link back
	// into the tree is read once.
	seen map[string]bool
	res  *Result
}

// walk reads dir (whose real path is real), depth folders below the
// root, and the folders below it. A folder reached twice (through a link
// inside the root) is read once.
func (s *search) walk(dir, real string, depth int) {
	if s.seen[real] {
		return
	}
	s.seen[real] = true
	entries, err := os.ReadDir(dir)
	if err != nil {
		return // unreadable: nothing of it to analyse
	}
	var dumps []string
	var newest time.Time
	for _, e := range entries {
		path, target := filepath.Join(dir, e.Name()), filepath.Join(real, e.Name())
		isDir := e.IsDir()
		if e.Type()&os.ModeSymlink != 0 {
			var ok bool
			if target, ok = s.inside(path); !ok {
				continue
			}
			fi, err := os.Stat(target)
			if err != nil {
				continue
			}
			isDir = fi.IsDir()
		}
		switch {
		case isDir:
			if depth < s.maxDepth {
				s.walk(path, target, depth+1)
			}
		case isDumpName(e.Name()):
			fi, err := os.Stat(target)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			dumps = append(dumps, path)
			if fi.ModTime().After(newest) {
				newest = fi.ModTime()
			}
		}
	}
	if len(dumps) > 0 {
		a := name(real)
		a.Dir, a.Dumps, a.Newest = dir, dumps, newest
		s.res.Attempts = append(s.res.Attempts, a)
	}
}

// inside resolves the link at path and reports whether its target lies
// in the root; a link leading outside is noted as refused.
func (s *search) inside(path string) (string, bool) {
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", false // dangling
	}
	if target, err = filepath.Abs(target); err != nil {
		return "", false
	}
	rel, err := filepath.Rel(s.realRoot, target)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		s.res.Refused = append(s.res.Refused, path+" -> "+target)
		return "", false
	}
	return target, true
}

// isDumpName reports whether name is fr_trace_rank_<rank>.json.
func isDumpName(name string) bool {
	_, ok := watchdog.ParseDumpFileName(name)
	return ok
}

// name places a folder of dumps, by its real absolute path, in gorun's
// layout: <run>/attempt_<n>/flight_recorder or <run>/attempt_<n>.
func name(abs string) Attempt {
	if filepath.Base(abs) == launcher.FlightRecorderFolder {
		abs = filepath.Dir(abs)
	}
	if n, ok := goodput.ParseAttemptName(filepath.Base(abs)); ok {
		return Attempt{Run: filepath.Base(filepath.Dir(abs)), Number: n}
	}
	return Attempt{Number: -1}
}

// order sorts attempts oldest run first (a run's age is its newest
// dump's), then by run name in creation order (job < job.1 < job.2),
// then by attempt number.
func order(as []Attempt) {
	runNewest := map[string]time.Time{}
	for _, a := range as {
		if a.Newest.After(runNewest[a.Run]) {
			runNewest[a.Run] = a.Newest
		}
	}
	slices.SortStableFunc(as, func(x, y Attempt) int {
		if c := runNewest[x.Run].Compare(runNewest[y.Run]); c != 0 {
			return c
		}
		if c := compareRuns(x.Run, y.Run); c != 0 {
			return c
		}
		if x.Number != y.Number {
			return x.Number - y.Number
		}
		return strings.Compare(x.Dir, y.Dir)
	})
}

// compareRuns orders run folder names as gorun creates them: <id>, then
// <id>.1, <id>.2, ... (numerically, so <id>.10 after <id>.9).
func compareRuns(x, y string) int {
	xb, xn := runSuffix(x)
	yb, yn := runSuffix(y)
	if c := strings.Compare(xb, yb); c != 0 {
		return c
	}
	return xn - yn
}

// runSuffix splits <id>.<k> into <id> and k (0 without a suffix).
func runSuffix(run string) (string, int) {
	i := strings.LastIndexByte(run, '.')
	if i < 0 {
		return run, 0
	}
	k, err := strconv.Atoi(run[i+1:])
	if err != nil || k <= 0 {
		return run, 0
	}
	return run[:i], k
}
