package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Report is the outcome of a run of the suite.
type Report struct {
	Seed     uint64
	rounds   []roundResult
	Duration time.Duration
}

// Completed, Failed and Wrong count the jobs that completed with the right
// result, failed with a clear verdict, and did anything else (a wrong
// result, a hang, a failure that says nothing, an injector's error).
func (r *Report) Completed() int { return r.count("completed") }

// Failed counts the jobs that failed with a clear verdict.
func (r *Report) Failed() int { return r.count("failed") }

// Wrong counts the jobs that went wrong (see Completed).
func (r *Report) Wrong() int { return len(r.rounds) - r.Completed() - r.Failed() }

func (r *Report) count(prefix string) int {
	n := 0
	for _, rr := range r.rounds {
		if strings.HasPrefix(rr.verdict, prefix) {
			n++
		}
	}
	return n
}

// Orphans lists the processes that outlived their job.
func (r *Report) Orphans() []string {
	var out []string
	for _, rr := range r.rounds {
		out = append(out, rr.orphans...)
	}
	return out
}

// Leaked lists the gorun files left in /dev/shm.
func (r *Report) Leaked() []string {
	var out []string
	for _, rr := range r.rounds {
		out = append(out, rr.leaked...)
	}
	return out
}

// Problems describes every round that went wrong, every orphan and every
// leaked file; empty when the run is clean. A fault after which the job
// completed without another step is none: every restart trains from step
// 0, so the fault came after the job's last step.
func (r *Report) Problems() []string {
	var out []string
	for i, rr := range r.rounds {
		if !strings.HasPrefix(rr.verdict, "completed") && !strings.HasPrefix(rr.verdict, "failed") {
			out = append(out, fmt.Sprintf("round %d (%s): %s", i, rr.script, rr.verdict))
		}
		for _, o := range rr.orphans {
			out = append(out, fmt.Sprintf("round %d: orphan %s", i, o))
		}
		for _, l := range rr.leaked {
			out = append(out, fmt.Sprintf("round %d: leaked /dev/shm/%s", i, l))
		}
	}
	return out
}

// Table is the report in Markdown: one row per kind of fault, then the
// jobs.
func (r *Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| fault | injected | job interrupted | training again: median | p95 | max | not again |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|\n")
	var all []time.Duration
	total := 0
	for _, k := range Kinds {
		var times []time.Duration
		n, interrupted, never := 0, 0, 0
		for _, rr := range r.rounds {
			for _, f := range rr.faults {
				if f.kind != k {
					continue
				}
				n++
				if f.interrupted {
					interrupted++
				}
				if f.ok {
					times = append(times, f.recovered)
				} else {
					never++
				}
			}
		}
		total += n
		all = append(all, times...)
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %d |\n", k, n, interrupted, quantile(times, 0.5), quantile(times, 0.95), quantile(times, 1), never)
	}
	fmt.Fprintf(&b, "| **all** | %d | | %s | %s | %s | |\n\n", total, quantile(all, 0.5), quantile(all, 0.95), quantile(all, 1))
	fmt.Fprintf(&b, "| seed | jobs | completed | failed, with a verdict | wrong | orphans | leaked /dev/shm files | suite time |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d | %d | %s |\n", r.Seed, len(r.rounds), r.Completed(), r.Failed(), r.Wrong(),
		len(r.Orphans()), len(r.Leaked()), r.Duration.Round(time.Second))
	return b.String()
}

// Rounds is one line per job: its script, verdict, final line and time.
func (r *Report) Rounds() string {
	var b strings.Builder
	for i, rr := range r.rounds {
		fmt.Fprintf(&b, "round %2d %5.1fs %-55s %s", i, rr.duration.Seconds(), rr.verdict, rr.final)
		for _, f := range rr.faults {
			again := "never"
			if f.ok {
				again = f.recovered.Round(10 * time.Millisecond).String()
			}
			fmt.Fprintf(&b, "\n    %s on node %d (%s): training again after %s", f.kind, f.node, f.target, again)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// quantile is the q-quantile of ds (nearest rank), "-" for none.
func quantile(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	i = min(max(i, 0), len(s)-1)
	return s[i].Round(10 * time.Millisecond).String()
}
