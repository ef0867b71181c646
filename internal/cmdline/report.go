package cmdline

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/launcher"

	"github.com/gorun-dev/gorun/internal/sys/private"
)

// reportCommand is `gorun report LOGDIR`: where a run's wall time went,
// from the timeline its agent wrote (events.jsonl) and, while it runs, its
// workers' progress files.
func reportCommand() *cli.Command {
	return &cli.Command{
		Name: "report",
		Usage: "say where a run's wall time went (goodput): rendezvous, startup, productive training, time lost to failures, " +
			"preemption, teardown; LOGDIR is a run folder (with " + launcher.EventsFile + ") or a --log-dir, whose latest run is reported",
		ArgsUsage: "LOGDIR",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text or json"},
			&cli.StringFlag{Name: "now", Hidden: true, Usage: "report a running job up to this time (RFC3339) instead of now; for tests"},
		},
		Action: reportAction,
	}
}

// reportAction runs `gorun report`.
func reportAction(c *cli.Context) error {
	if c.NArg() != 1 {
		return Usagef("report: want one LOGDIR (a run folder or a --log-dir), got %d arguments", c.NArg())
	}
	logDir := c.Args().First()
	format := c.String("format")
	if format != "text" && format != "json" {
		return Usagef("report: --format=%q: want text or json", format)
	}
	now := time.Now()
	if s := c.String("now"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return Usagef("report: --now=%q: want an RFC3339 time such as 2026-03-01T12:00:00Z", s)
		}
		now = t
	}
	run, picked, err := findRunFolder(logDir)
	if err != nil {
		return Usagef("report: %v", err)
	}
	if picked {
		fmt.Fprintf(c.App.ErrWriter, "gorun: report: reporting %s, the run in %s whose %s changed last\n", run, logDir, launcher.EventsFile)
	}
	path := filepath.Join(run, launcher.EventsFile)
	events, err := readEventsFile(path)
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return Usagef("report: %s has no events: the run in %s has not started", path, logDir)
	}
	r, err := launcher.ComputeReport(events, now, runningProgress(run, events, c.App.ErrWriter))
	if err != nil {
		return cli.Exit(fmt.Sprintf("report: %s: %v", path, err), 1)
	}
	if format == "json" {
		return r.WriteJSON(c.App.Writer)
	}
	return r.WriteText(c.App.Writer)
}

// findRunFolder returns dir when it holds an events file, else the folder
// in it whose events file was modified last (picked true).
func findRunFolder(dir string) (run string, picked bool, err error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return "", false, fmt.Errorf("LOGDIR: %w", err)
	}
	if !fi.IsDir() {
		return "", false, fmt.Errorf("LOGDIR %s is not a folder; want a run folder (with %s) or a --log-dir", dir, launcher.EventsFile)
	}
	if isRegular(filepath.Join(dir, launcher.EventsFile)) {
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
		fi, err := os.Lstat(filepath.Join(dir, e.Name(), launcher.EventsFile))
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if run == "" || !fi.ModTime().Before(latest) {
			run, latest = filepath.Join(dir, e.Name()), fi.ModTime()
		}
	}
	if run == "" {
		return "", false, fmt.Errorf("LOGDIR %s holds no %s, nor does any folder in it; want a run folder (<log_dir>/<run_id>) or a --log-dir of a run", dir, launcher.EventsFile)
	}
	return run, true, nil
}

// isRegular reports whether path is a regular file (not a link to one).
func isRegular(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular()
}

// maxEventsBytes bounds the timeline read: far beyond any real run's (an
// event is ~200 bytes: 32 MiB is 150,000 events, a restart every 5 minutes
// for a year), so that a file that is not one costs nothing.
const maxEventsBytes = 32 << 20

// readEventsFile reads an events file: a file it cannot open is a usage
// error (exit 2), bad content exit 1.
func readEventsFile(path string) ([]launcher.Event, error) {
	// Without blocking, then checked: a FIFO swapped in must not hold us.
	f, st, err := private.OpenRegular(path)
	switch {
	case errors.Is(err, private.ErrNotRegular):
		return nil, Usagef("report: %s is not a regular file", path)
	case err != nil:
		return nil, Usagef("report: %v", err)
	}
	defer f.Close()
	if st.Size() > maxEventsBytes {
		return nil, cli.Exit(fmt.Sprintf("report: %s is %d MiB, above the %d MiB a run's timeline can hold: not read (is it gorun's?)", path, st.Size()>>20, maxEventsBytes>>20), 1)
	}
	events, err := launcher.ReadEvents(io.LimitReader(f, maxEventsBytes))
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("report: %s: %v", path, err), 1)
	}
	return events, nil
}

// runningProgress reads the progress files of the attempt that runs (a
// spawn without its end, in a timeline without an exit), merged over its
// workers; nil when none runs. A progress file it cannot read is a warning
// on stderr.
func runningProgress(run string, events []launcher.Event, stderr io.Writer) map[int]launcher.Progress {
	attempt, open := 0, false
	for _, e := range events {
		switch e.Kind {
		case launcher.EventSpawn:
			attempt, open = e.Attempt, true
		case launcher.EventEnd, launcher.EventExit:
			open = false
		}
	}
	if !open {
		return nil
	}
	dir := launcher.AttemptDir(run, attempt)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stderr, "gorun: warning: report: %v\n", err)
		}
		return nil
	}
	var ps []launcher.Progress
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p, err := launcher.ReadProgress(filepath.Join(dir, e.Name(), launcher.ProgressFile))
		if err != nil {
			fmt.Fprintf(stderr, "gorun: warning: report: %v\n", err)
			continue
		}
		ps = append(ps, p)
	}
	return map[int]launcher.Progress{attempt: launcher.MergeProgress(ps...)}
}
