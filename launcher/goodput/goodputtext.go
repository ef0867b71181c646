package goodput

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// maxShortReason bounds a failure's reason in Report.Short.
const maxShortReason = 100

// WriteText writes the report as a readable table: each category's
// seconds and share of the wall time, then the failures and the attempts.
// Times are in UTC.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "goodput of run %s on node %s\n", goodputOrDash(goodputOneLine(r.RunID, 0)), goodputOrDash(goodputOneLine(r.Node, 0)))
	state := "still running"
	if r.ExitCode != nil {
		state = "exit code " + strconv.Itoa(*r.ExitCode)
	}
	restarts := ""
	if r.Restarts > 0 {
		restarts = ", " + goodputPlural(r.Restarts, "restart")
	}
	fmt.Fprintf(&b, "from %s to %s (%s)\nwall time %s: %s%s\n\n",
		r.Start.UTC().Format(time.RFC3339Nano), r.End.UTC().Format(time.RFC3339Nano), state,
		goodputDuration(r.WallSeconds), r.headline(), restarts)
	fmt.Fprintf(&b, "%-12s %12s %10s\n", "category", "seconds", "% of wall")
	for _, c := range goodputCategories() {
		fmt.Fprintf(&b, "%-12s %12.3f %10s\n", c, r.Seconds[c], r.percent(r.Seconds[c]))
	}
	fmt.Fprintf(&b, "%-12s %12.3f %10s\n", "total", r.WallSeconds, r.percent(r.WallSeconds))
	var tw *tabwriter.Writer
	if len(r.Failures) > 0 {
		fmt.Fprintf(&b, "\nfailures (time lost from the last checkpoint, else the last step seen, to the next attempt):\n")
		tw = tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "attempt\thow\tlost (s)\tsince\tfrom\tto\treason\n")
		for _, f := range r.Failures {
			fmt.Fprintf(tw, "%d\t%s\t%.3f\t%s\t%s\t%s\t%s\n", f.Attempt, f.How, f.LostSeconds, lossSince(f.Since),
				goodputClock(f.From), goodputClock(f.To), goodputOrDash(goodputOneLine(f.Reason, 0)))
		}
		tw.Flush()
	}
	if len(r.Stragglers) > 0 {
		fmt.Fprintf(&b, "\nstragglers (ranks that entered collectives last, and made the others wait):\n")
		tw = tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "rank\tgroup\tsince\tcollective\tstep\tlate\tlag (s)\n")
		for _, s := range r.Stragglers {
			step := "unknown"
			if s.Step >= 0 {
				step = strconv.FormatInt(s.Step, 10)
			}
			late := fmt.Sprintf("%d of %d", s.Late, s.Window)
			if s.Recovered {
				late = "recovered"
			}
			rank := strconv.Itoa(s.Rank)
			if s.Node != "" {
				rank = "all of " + s.Node
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t#%d\t%s\t%s\t%.3f\n", rank, s.Group, goodputClock(s.SinceTime), s.Since, step, late, s.LagSeconds)
		}
		tw.Flush()
	}
	if len(r.Attempts) > 0 {
		fmt.Fprintf(&b, "\nattempts:\n")
		tw = tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "attempt\tround\tworld\tspawned\tended\thow\tstartup (s)\tproductive (s)\tsteps\tfrom\tcheckpoint\n")
		for _, a := range r.Attempts {
			startup := fmt.Sprintf("%.3f", a.StartupSeconds)
			if !a.Measured {
				startup = "unknown"
			}
			ended := "-"
			if !a.Ended.IsZero() {
				ended = goodputClock(a.Ended)
			}
			ckpt := "-"
			switch {
			case a.CheckpointStep != nil:
				ckpt = fmt.Sprintf("%s (step %d)", goodputClock(a.Checkpoint), *a.CheckpointStep)
			case !a.Checkpoint.IsZero():
				ckpt = goodputClock(a.Checkpoint) + " (step unknown)"
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t%.3f\t%s\t%s\t%s\n", a.Attempt, a.Round, a.WorldSize,
				goodputClock(a.Spawned), ended, a.How, startup, a.ProductiveSeconds, a.steps(), goodputOrDash(a.ProgressFrom), ckpt)
		}
		tw.Flush()
	}
	if note := r.unmeasured(); note != "" {
		fmt.Fprintf(&b, "\nnote: %s\n", note)
	}
	if slices.ContainsFunc(r.Failures, func(f FailureLoss) bool { return f.Since == "step" }) {
		fmt.Fprintf(&b, "\nnote: %s\n", noCheckpointNote)
	}
	if slices.ContainsFunc(r.Attempts, func(a AttemptReport) bool { return a.ProgressFrom == "probe" }) {
		fmt.Fprintf(&b, "\nnote: steps from the probe are the optimizer steps each attempt took, counted from 1 at its start, not the script's own step numbers (a resumed script's step 101 is its attempt's step 1); a checkpoint's step is that count at its save\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// lossSince says where a failure's loss starts, for the table.
func lossSince(s string) string {
	switch s {
	case "checkpoint":
		return "checkpoint"
	case "step":
		return "last step (no checkpoint seen)"
	case "spawn":
		return "spawn (no step seen)"
	}
	return "-"
}

// noCheckpointNote says what a loss counted from the last step means.
const noCheckpointNote = "no checkpoint seen before a failure: its steps count as productive, as if saved; a script that did not save lost them too"

// unmeasured says which attempts reported no step, and what that makes of
// the figures; "" when every attempt did.
func (r Report) unmeasured() string {
	var as []string
	running := false
	for _, a := range r.Attempts {
		if a.How == "running" && !a.Measured {
			running = true // said apart: it may not have reached its first step
			continue
		}
		if n := strconv.Itoa(a.Attempt); !a.Measured && !slices.Contains(as, n) {
			as = append(as, n)
		}
	}
	var notes []string
	if len(as) > 0 {
		notes = append(notes, fmt.Sprintf("steps not measured in attempt %s (no progress file, and no optimizer step seen: PyTorch 1.x, --worker-probe=off, or not PyTorch): its startup counts as productive, and a failed attempt is lost whole, or from its last checkpoint when one was seen",
			strings.Join(as, ", ")))
	}
	if running {
		notes = append(notes, "the running attempt has shown no step yet (none taken, or its workers' last snapshot is older): its time so far counts as startup")
	}
	return strings.Join(notes, "; ")
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// Short summarises the report in two or three lines, for the end of a
// failed run: the productive share, where the rest went, and what the
// failures cost.
func (r Report) Short() string {
	var parts []string
	for _, c := range goodputCategories() {
		if s := r.Seconds[c]; c != GoodputProductive && s > 0 {
			parts = append(parts, c+" "+goodputDuration(s))
		}
	}
	restarts := ""
	if r.Restarts > 0 {
		restarts = ", " + goodputPlural(r.Restarts, "restart")
	}
	line := fmt.Sprintf("goodput: %s of %s%s", r.headline(), goodputDuration(r.WallSeconds), restarts)
	if r.unmeasured() != "" {
		line = fmt.Sprintf("goodput: %s of %s%s, steps not measured (gorun report says more)", r.headline(), goodputDuration(r.WallSeconds), restarts)
	}
	if len(parts) > 0 {
		line += ": " + strings.Join(parts, ", ")
	}
	if len(r.Failures) == 0 {
		return line
	}
	var lost float64
	worst := r.Failures[0]
	for _, f := range r.Failures {
		lost += f.LostSeconds
		if f.LostSeconds > worst.LostSeconds {
			worst = f
		}
	}
	cause := fmt.Sprintf("attempt %d %s", worst.Attempt, worst.How)
	if reason := goodputOneLine(worst.Reason, maxShortReason); reason != "" {
		cause += " (" + reason + ")"
	}
	if len(r.Failures) > 1 {
		cause = fmt.Sprintf("the most, %s, in %s", goodputDuration(worst.LostSeconds), cause)
	}
	out := fmt.Sprintf("%s\ngoodput: lost %s in %s: %s", line, goodputDuration(lost),
		goodputPlural(len(r.Failures), "failure"), cause)
	if slices.ContainsFunc(r.Failures, func(f FailureLoss) bool { return f.Since == "step" }) {
		// gorun cannot tell a script that never saves from one whose
		// saves it did not see (another node's, another writer's).
		out += "\ngoodput: " + noCheckpointNote
	}
	return out
}

// headline is the productive share, e.g. "71.2% productive (ETTR)".
func (r Report) headline() string {
	return fmt.Sprintf("%.1f%% productive (ETTR)", 100*r.EffectiveTrainingTimeRatio)
}

// percent is s as a share of the wall time.
func (r Report) percent(s float64) string {
	if r.WallSeconds <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", 100*s/r.WallSeconds)
}

// steps is the attempt's step range, "-" when unknown.
func (a AttemptReport) steps() string {
	switch {
	case a.FirstStep != nil && a.LastStep != nil:
		return fmt.Sprintf("%d-%d", *a.FirstStep, *a.LastStep)
	case a.LastStep != nil:
		return fmt.Sprintf("..%d", *a.LastStep)
	}
	return "-"
}

// goodputDuration writes seconds as a duration to a tenth of a second.
func goodputDuration(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d < time.Second {
		return d.Round(time.Millisecond).String() // not "0s" for a short part
	}
	return d.Round(100 * time.Millisecond).String()
}

// goodputClock is t's time of day in UTC, to the millisecond.
func goodputClock(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// goodputOneLine puts s on one line, cut to limit runes when limit > 0.
func goodputOneLine(s string, limit int) string {
	s = strings.Join(strings.Fields(s), " ")
	// The file is input: no terminal escapes reach the screen.
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
	if r := []rune(s); limit > 0 && len(r) > limit {
		s = string(r[:limit-3]) + "..."
	}
	return s
}

// goodputOrDash is s, or "-" when empty.
func goodputOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// goodputPlural is "1 failure", "2 failures".
func goodputPlural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
