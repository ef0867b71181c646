package cmdline

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/sys/private"
)

// reportCommand is `gorun report LOGDIR`: where a run's wall time went,
// from the timeline its agent wrote (events.jsonl) and, while it runs, its
// workers' progress files.
func reportCommand() *cli.Command {
	return &cli.Command{
		Name: "report",
		Usage: "say where a run's wall time went (goodput): rendezvous, startup, productive training, time lost to failures, " +
			"preemption, teardown; LOGDIR is a run folder (with " + goodput.EventsFile + ") or a --log-dir, whose latest run is reported",
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
	run, picked, err := goodput.FindRunFolder(logDir)
	if err != nil {
		return Usagef("report: %w", err)
	}
	if picked {
		fmt.Fprintf(c.App.ErrWriter, "gorun: report: reporting %s, the run in %s whose %s changed last\n", run, logDir, goodput.EventsFile)
	}
	path := filepath.Join(run, goodput.EventsFile)
	events, err := readEventsFile(path)
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return Usagef("report: %s has no events: the run in %s has not started", path, logDir)
	}
	progress, warnings := goodput.RunningProgress(run, events)
	for _, w := range warnings {
		fmt.Fprintf(c.App.ErrWriter, "gorun: warning: report: %v\n", w)
	}
	r, err := goodput.ComputeReport(events, now, progress)
	if err != nil {
		return cli.Exit(fmt.Sprintf("report: %s: %v", path, err), 1)
	}
	if format == "json" {
		return r.WriteJSON(c.App.Writer)
	}
	return r.WriteText(c.App.Writer)
}

// maxEventsBytes bounds the timeline read: far beyond any real run's (an
// event is ~200 bytes: 32 MiB is 150,000 events, a restart every 5 minutes
// for a year), so that a file that is not one costs nothing.
const maxEventsBytes = 32 << 20

// readEventsFile reads an events file: a file it cannot open is a usage
// error (exit 2), bad content exit 1.
func readEventsFile(path string) ([]goodput.Event, error) {
	// Without blocking, then checked: a FIFO swapped in must not hold us.
	f, st, err := private.OpenRegular(path)
	switch {
	case errors.Is(err, private.ErrNotRegular):
		return nil, Usagef("report: %s is not a regular file", path)
	case err != nil:
		return nil, Usagef("report: %w", err)
	}
	defer f.Close()
	if st.Size() > maxEventsBytes {
		return nil, cli.Exit(fmt.Sprintf("report: %s is %d MiB, above the %d MiB a run's timeline can hold: not read (is it gorun's?)", path, st.Size()>>20, maxEventsBytes>>20), 1)
	}
	events, err := goodput.ReadEvents(io.LimitReader(f, maxEventsBytes))
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("report: %s: %v", path, err), 1)
	}
	return events, nil
}
