package goodput

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/workerenv"
)

// ProgressFile is the name of a worker's progress file in its folder.
const ProgressFile = "progress"

// maxProgressFile bounds how much of a progress file is read.
const maxProgressFile = 4 << 10

// Progress is what a worker's progress file says, or several merged.
type Progress struct {
	Step      int       // the last step reported
	FirstStep int       // the first step reported
	Time      time.Time // when Step was reported
	FirstTime time.Time // when FirstStep was reported
	// Seen is false when there is no progress: no file yet, or nothing
	// merged.
	Seen bool
}

// ReadProgress reads a worker's progress file (see workerenv.ProgressFile). A
// missing or empty file gives Progress{} and no error: the worker reported
// no step yet. It does not follow a link at path, refuses anything but a
// regular file, and reads at most 4 KiB. An error names the path and the
// field at fault.
func ReadProgress(path string) (Progress, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return Progress{}, nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return Progress{}, fmt.Errorf("progress file %s is a symbolic link; want a regular file", path)
	}
	if err != nil {
		return Progress{}, fmt.Errorf("progress file: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return Progress{}, fmt.Errorf("progress file: %w", err)
	} else if !fi.Mode().IsRegular() {
		return Progress{}, fmt.Errorf("progress file %s is a %s; want a regular file", path, fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxProgressFile+1))
	if err != nil {
		return Progress{}, fmt.Errorf("progress file: %w", err)
	}
	if len(data) > maxProgressFile {
		return Progress{}, fmt.Errorf("progress file %s is over %d KiB; want one line of key=value fields", path, maxProgressFile>>10)
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	p, err := parseProgress(string(line))
	if err != nil {
		return Progress{}, fmt.Errorf("progress file %s: %w", path, err)
	}
	return p, nil
}

// parseProgress reads a progress line (workerenv.ProgressLine); an empty
// one is no progress.
func parseProgress(line string) (Progress, error) {
	l, ok, err := workerenv.ParseProgressLine(line)
	if err != nil || !ok {
		return Progress{}, err
	}
	return Progress{Step: l.Step, FirstStep: l.FirstStep, Time: time.Unix(0, l.TimeNs), FirstTime: time.Unix(0, l.FirstTimeNs), Seen: true}, nil
}

// WorkersProgress is the workers' progress: their progress files'
// merged, else (a script that knows nothing of gorun writes none) their
// probes' counts merged; from says which ("progress file", "probe"; ""
// for neither).
func WorkersProgress(files, probed []Progress) (p Progress, from string) {
	if p = MergeProgress(files...); p.Seen {
		return p, "progress file"
	}
	if p = MergeProgress(probed...); p.Seen {
		return p, "probe"
	}
	return p, ""
}

// MergeProgress merges the progress of several workers of a node: the
// earliest first step (FirstTime, and the smallest FirstStep), the latest
// step time and the largest Step. Those not Seen are left out; with none
// Seen, it returns Progress{}.
func MergeProgress(ps ...Progress) Progress {
	var m Progress
	for _, p := range ps {
		if !p.Seen {
			continue
		}
		if !m.Seen {
			m = p
			continue
		}
		if p.FirstTime.Before(m.FirstTime) {
			m.FirstTime = p.FirstTime
		}
		if p.Time.After(m.Time) {
			m.Time = p.Time
		}
		m.FirstStep, m.Step = min(m.FirstStep, p.FirstStep), max(m.Step, p.Step)
	}
	return m
}
