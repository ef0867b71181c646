package bench

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Targets of the launch benchmark (issue 2).
const (
	// TargetEmptyRatio is the most the empty job may take, as a fraction
	// of torchrun's time.
	TargetEmptyRatio = 0.03
	// TargetRestart is the most a failure may take to be replaced.
	TargetRestart = 30 * time.Millisecond
)

// Markdown renders the launch results as a section of docs/benchmarks.md.
func (r LaunchResult) Markdown(when time.Time, runs int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Launch and restart (`gorun bench launch`)\n\n")
	fmt.Fprintf(&b, "Measured %s, %d runs per case after warm-up, gorun and torchrun alternating run by run.\n\n", when.UTC().Format("2006-01-02 15:04 MST"), runs)
	fmt.Fprintf(&b, "- Machine: %s\n- Anchor: %s\n\n", r.Machine, r.Torchrun)
	b.WriteString("Medians, with [min-max].\n\n")
	b.WriteString("| case | gorun | torchrun | gorun / torchrun | target |\n|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| empty 2-worker job, start to exit | %s | %s | %s | <= %.2fx torchrun |\n",
		r.EmptyGorun, r.EmptyTorchrun, ratio(r.EmptyGorun, r.EmptyTorchrun), TargetEmptyRatio)
	fmt.Fprintf(&b, "| failure -> replacement's first statement, rank 0 running | %s | %s | %s | <= %s |\n",
		r.RestartGorun, r.RestartTorchrun, ratio(r.RestartGorun, r.RestartTorchrun), ms(TargetRestart))
	fmt.Fprintf(&b, "| failure -> replacement's first statement, rank 0 done | %s | %s | %s | <= %s |\n\n",
		r.RestartGorunDone, r.RestartTorchrunDone, ratio(r.RestartGorunDone, r.RestartTorchrunDone), ms(TargetRestart))
	b.WriteString("Floors measured in the same run:\n\n")
	fmt.Fprintf(&b, "- two bare `python3 -u noop.py` started and reaped directly: %s (gorun's empty job is %s of it)\n",
		r.EmptyBare, ratio(r.EmptyGorun, r.EmptyBare))
	fmt.Fprintf(&b, "- failure -> replacement's first statement under a minimal Go supervisor (reap, kill the other worker, start two replacements; no rendezvous, logs or checks): %s (gorun's gap with rank 0 running is %s of it)\n",
		r.RestartMinimal, ratio(r.RestartGorun, r.RestartMinimal))
	fmt.Fprintf(&b, "- one interpreter's start-up and exit (every replacement pays its start-up before its first statement): %s\n\n", r.Interpreter)
	b.WriteString(r.Overhead.Markdown() + "\n")
	b.WriteString(verdict(r))
	return b.String()
}

func ratio(a, b Stats) string {
	if x := Ratio(a, b); x > 0 {
		return fmt.Sprintf("%.3fx", x)
	}
	return "n/a"
}

// verdict says whether the targets are met, in words.
func verdict(r LaunchResult) string {
	var b strings.Builder
	if x := Ratio(r.EmptyGorun, r.EmptyTorchrun); x > 0 {
		ok := "met"
		if x > TargetEmptyRatio {
			ok = "NOT met"
		}
		fmt.Fprintf(&b, "Empty job: %.3fx torchrun, target %.2fx: %s.\n", x, TargetEmptyRatio, ok)
	}
	for _, c := range []struct {
		name string
		s    Stats
	}{{"rank 0 running", r.RestartGorun}, {"rank 0 done", r.RestartGorunDone}} {
		ok := "met"
		if c.s.Median > TargetRestart {
			ok = "NOT met"
		}
		fmt.Fprintf(&b, "Failure to replacement (%s): median %s, target %s: %s.\n", c.name, ms(c.s.Median), ms(TargetRestart), ok)
	}
	return b.String()
}

// UpdateSection replaces the text between the markers of section name in
// the markdown file at path (creating the file or appending the section
// when missing).
func UpdateSection(path, name, body string) error {
	begin, end := "<!-- begin "+name+" -->", "<!-- end "+name+" -->"
	block := begin + "\n" + strings.TrimRight(body, "\n") + "\n" + end + "\n"
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := string(data)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	switch {
	case i >= 0 && j > i:
		doc = doc[:i] + block + strings.TrimPrefix(doc[j+len(end):], "\n")
	case doc == "":
		doc = "# Benchmarks\n\nWritten by `make bench` (`gorun bench ...`); each section is replaced when its benchmark runs again.\n\n" + block
	default:
		doc = strings.TrimRight(doc, "\n") + "\n\n" + block
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
