package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// TargetOverhead is the most gorun may add to the start and exit of two
// workers that do nothing, over a shell starting the same two processes
// (issue 11).
const TargetOverhead = 5 * time.Millisecond

// Overhead is gorun's own cost at launch: an empty job of two /bin/true
// workers against the floor of starting the same two processes, all
// measured in one run, alternating run by run.
type Overhead struct {
	// Gorun is `gorun --nproc-per-node=2 --no-python /bin/true`.
	Gorun Stats `json:"gorun_true_job"`
	// Shell is `sh -c 'true & true & wait'`: a process that starts and
	// reaps the two workers, the floor.
	Shell Stats `json:"shell_true_job"`
	// Direct is the two processes started and reaped by the benchmark
	// itself: the workers' own cost, without any supervisor's start.
	Direct Stats `json:"direct_true_pair"`
	// Version is `gorun --version`: the binary's start and exit alone.
	Version Stats `json:"gorun_version"`
}

// Gap is gorun's median over the shell's.
func (o Overhead) Gap() time.Duration { return o.Gorun.Median - o.Shell.Median }

// Met reports whether the gap is within TargetOverhead.
func (o Overhead) Met() bool { return o.Shell.N > 0 && o.Gap() <= TargetOverhead }

// String is the progress line of the measurement.
func (o Overhead) String() string {
	return fmt.Sprintf("launch overhead, two /bin/true workers: gorun %s, shell %s (gap %s), direct %s, gorun --version %s",
		o.Gorun, o.Shell, ms(o.Gap()), o.Direct, o.Version)
}

// Markdown renders the overhead as lines of the launch section.
func (o Overhead) Markdown() string {
	var b strings.Builder
	b.WriteString("Launch overhead: two `/bin/true` workers (no interpreter), medians with [min-max], all alternating run by run:\n\n")
	b.WriteString("| command | time |\n|---|---|\n")
	fmt.Fprintf(&b, "| `gorun --nproc-per-node=2 --no-python /bin/true` | %s |\n", o.Gorun)
	fmt.Fprintf(&b, "| floor: `sh -c 'true & true & wait'` (a shell starting the same two processes) | %s |\n", o.Shell)
	fmt.Fprintf(&b, "| the two processes started by the benchmark itself | %s |\n", o.Direct)
	fmt.Fprintf(&b, "| `gorun --version` | %s |\n\n", o.Version)
	verdict := "met"
	if !o.Met() {
		verdict = "NOT met"
	}
	fmt.Fprintf(&b, "Launch overhead over the shell: %s (median gap), target %s: %s.\n", ms(o.Gap()), ms(TargetOverhead), verdict)
	return b.String()
}

// measureOverhead times gorun's empty /bin/true job, the shell floor, the
// direct start and gorun --version, round-robin.
func measureOverhead(ctx context.Context, gorun string, runs, warmup int) (Overhead, error) {
	truePath, err := exec.LookPath("true")
	if err != nil {
		return Overhead{}, fmt.Errorf("no true(1) on PATH: %w", err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		return Overhead{}, fmt.Errorf("no sh on PATH: %w", err)
	}
	cases := []struct {
		argv []string
		out  *Stats
	}{
		{[]string{gorun, "--nproc-per-node=2", "--no-python", truePath}, nil},
		{[]string{sh, "-c", truePath + " & " + truePath + " & wait"}, nil},
		{[]string{gorun, "--version"}, nil},
	}
	var o Overhead
	cases[0].out, cases[1].out, cases[2].out = &o.Gorun, &o.Shell, &o.Version
	samples := make([]Sample, len(cases))
	var direct Sample
	for i := range warmup + runs {
		for j, c := range cases {
			d, err := timeCommand(ctx, c.argv, nil)
			if err != nil {
				return o, err
			}
			if i >= warmup {
				samples[j] = append(samples[j], d)
			}
		}
		d, err := timeBare(ctx, []string{truePath}, 2)
		if err != nil {
			return o, err
		}
		if i >= warmup {
			direct = append(direct, d)
		}
	}
	for j, c := range cases {
		*c.out = samples[j].Stats()
	}
	o.Direct = direct.Stats()
	return o, nil
}
