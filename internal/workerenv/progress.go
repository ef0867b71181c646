package workerenv

import (
	"fmt"
	"strconv"
	"strings"
)

// ProgressLine is one report in a worker's progress file (ProgressFile):
// the whole file is one line,
//
//	step=<int> time=<unix_ns> first_step=<int> first_time=<unix_ns>
//
// replaced atomically (write <path>.tmp, rename) after each step. Time is
// when Step was reported; FirstStep and FirstTime are the first step the
// writing process reported and when, so that a reader can tell its rate
// from a restarted process's. Fields of a later version are ignored.
// gorun's Go workers write it through comm.ProgressReporter, Python
// workers through launcher/pyhelpers' gorun_preempt; launcher/goodput
// reads it.
type ProgressLine struct {
	Step, FirstStep     int
	TimeNs, FirstTimeNs int64
}

// progressWant is the line's form, for errors.
const progressWant = "want step=<int> time=<unix_ns> first_step=<int> first_time=<unix_ns>"

// String is the line as written, with its newline.
func (p ProgressLine) String() string {
	return "step=" + strconv.Itoa(p.Step) + " time=" + strconv.FormatInt(p.TimeNs, 10) +
		" first_step=" + strconv.Itoa(p.FirstStep) + " first_time=" + strconv.FormatInt(p.FirstTimeNs, 10) + "\n"
}

// ParseProgressLine reads a progress line; ok is false for an empty one
// (no step reported yet). An error names the field at fault and the form.
func ParseProgressLine(line string) (p ProgressLine, ok bool, err error) {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return ProgressLine{}, false, nil
	}
	values := map[string]int64{}
	for _, f := range fields {
		k, v, found := strings.Cut(f, "=")
		if !found || k == "" {
			return ProgressLine{}, false, fmt.Errorf("%q is not key=value; %s", f, progressWant)
		}
		switch k {
		case "step", "time", "first_step", "first_time":
		default:
			continue // a field of a later version
		}
		if _, dup := values[k]; dup {
			return ProgressLine{}, false, fmt.Errorf("%s is given twice; %s", k, progressWant)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || (n == 0 && strings.HasSuffix(k, "time")) {
			return ProgressLine{}, false, fmt.Errorf("%s=%q; want a non-negative integer (a time in nanoseconds since 1970, above 0)", k, v)
		}
		values[k] = n
	}
	for _, k := range []string{"step", "time", "first_step", "first_time"} {
		if _, found := values[k]; !found {
			return ProgressLine{}, false, fmt.Errorf("no %s field; %s", k, progressWant)
		}
	}
	p = ProgressLine{Step: int(values["step"]), FirstStep: int(values["first_step"]), TimeNs: values["time"], FirstTimeNs: values["first_time"]}
	if p.FirstTimeNs > p.TimeNs {
		return ProgressLine{}, false, fmt.Errorf("first_time=%d is after time=%d; want the first step reported first", p.FirstTimeNs, p.TimeNs)
	}
	return p, true, nil
}
