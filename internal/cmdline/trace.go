package cmdline

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/tracefind"
	"github.com/gorun-dev/gorun/watchdog"
)

// traceCommand is `gorun trace DIR`: merge the ranks' flight-recorder
// dumps and say who hung on what. DIR may hold the dumps or be a folder
// above them, such as --log-dir: the latest attempt found below it is
// analysed, or every one with --all-attempts.
func traceCommand() *cli.Command {
	return &cli.Command{
		Name: "trace",
		Usage: "merge the ranks' flight-recorder dumps in DIR and name the rank(s) that hung, the collective, and any desync; " +
			"DIR may be a log folder (--log-dir): its latest attempt with dumps is analysed",
		ArgsUsage: "DIR",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text or json"},
			&cli.BoolFlag{Name: "all-attempts", Usage: "analyse every attempt with dumps below DIR, not only the latest"},
		},
		Action: func(c *cli.Context) error {
			args, err := traceArgs(c.Args().Slice(), c.String("format"), c.Bool("all-attempts"))
			if err != nil {
				return Usagef("trace: %w", err)
			}
			if err := runTrace(c.App.Writer, c.App.ErrWriter, args); err != nil {
				return ExitError(err, 1) // a write that failed
			}
			return nil
		},
	}
}

// traceOptions are the arguments of `gorun trace`.
type traceOptions struct {
	dir    string
	format string
	all    bool
}

// namedVerdict is one attempt's verdict in --format json, when the dumps
// were found below DIR.
type namedVerdict struct {
	tracefind.Attempt
	Verdict watchdog.Verdict `json:"verdict"`
}

// runTrace finds the dumps, analyses the attempts asked for and writes
// their verdicts.
func runTrace(stdout, stderr io.Writer, o traceOptions) error {
	found, err := tracefind.Find(o.dir, tracefind.Options{})
	if err != nil {
		return cli.Exit(message(err), 1) // it names the links refused
	}
	for _, r := range found.Refused {
		fmt.Fprintf(stderr, "gorun: warning: trace: not following %s: it leads outside %s\n", r, o.dir)
	}
	attempts := found.Attempts
	if !o.all {
		attempts = attempts[len(attempts)-1:]
	}
	var out []namedVerdict
	for _, a := range attempts {
		dumps, err := a.Read()
		if err != nil {
			return cli.Exit(message(err), 1)
		}
		out = append(out, namedVerdict{a, watchdog.Analyze(dumps)})
	}
	if found.Direct() {
		// The dumps' own folder: the output of gorun trace before it
		// searched.
		if o.format == "json" {
			return writeJSON(stdout, out[0].Verdict)
		}
		_, err := fmt.Fprint(stdout, out[0].Verdict.Text())
		return err
	}
	if o.format == "json" {
		return writeJSON(stdout, out)
	}
	var b strings.Builder
	for i, v := range out {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s (%s):\n", v.Name(), v.Dir)
		for _, l := range strings.SplitAfter(strings.TrimRight(v.Verdict.Text(), "\n"), "\n") {
			b.WriteString("  " + l)
		}
		b.WriteString("\n")
	}
	if n := len(found.Attempts); !o.all && n > 1 {
		fmt.Fprintf(&b, "(the latest of %d attempts with dumps below %s; --all-attempts analyses each)\n", n, o.dir)
	}
	_, err = fmt.Fprint(stdout, b.String())
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// traceArgs takes the directory, --format and --all-attempts from args,
// where the flags may also follow the directory (the flag parser stops at
// the first argument).
func traceArgs(args []string, format string, all bool) (traceOptions, error) {
	var dirs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--format" || a == "-format":
			if i+1 == len(args) {
				return traceOptions{}, fmt.Errorf("--format needs a value: text or json")
			}
			format = args[i+1]
			i++
		case strings.HasPrefix(a, "--format="):
			format = strings.TrimPrefix(a, "--format=")
		case a == "--all-attempts" || a == "-all-attempts":
			all = true
		default:
			dirs = append(dirs, a)
		}
	}
	if len(dirs) != 1 {
		return traceOptions{}, fmt.Errorf("want one argument, the folder of the dumps (fr_trace_rank_<rank>.json) or a log folder above it; got %d", len(dirs))
	}
	if format != "text" && format != "json" {
		return traceOptions{}, fmt.Errorf("--format=%q: want text or json", format)
	}
	return traceOptions{dir: dirs[0], format: format, all: all}, nil
}
