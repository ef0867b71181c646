package launcher

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Failure is one worker that failed on its own (not one the agent stopped).
type Failure struct {
	LocalRank int            `json:"local_rank"`
	Rank      int            `json:"rank"`
	PID       int            `json:"pid"`
	ExitCode  int            `json:"exit_code"`
	Signal    syscall.Signal `json:"signal,omitempty"`
	Time      time.Time      `json:"time"`
	Host      string         `json:"host"`
	// ErrorFile is the path of the worker's error file when it is kept
	// (--log-dir), else "".
	ErrorFile string `json:"error_file,omitempty"`
	// Error is what the worker wrote to its error file, if anything.
	Error *ErrorReport `json:"error,omitempty"`
	// ErrorFileProblem says why an error file could not be read.
	ErrorFileProblem string `json:"error_file_problem,omitempty"`
	// Logs are the worker's kept log files.
	Logs []string `json:"logs,omitempty"`
	// Hung says why gorun judged that this worker held the others up
	// (--hang-timeout).
	Hung string `json:"hung,omitempty"`
	// Left says that the worker exited 0 while the others ran, before
	// the failures that followed.
	Left string `json:"left,omitempty"`
	// LastLine is the last line the worker wrote to its stderr, shown
	// when it wrote no error file.
	LastLine string `json:"last_line,omitempty"`
	// errorFile is the worker's error file, kept or not, while the run
	// lasts (writeRootCause).
	errorFile string
	// blameless: the hang's verdict named no rank; this one stands for
	// the job.
	blameless bool
	// remote: the rank ran on another node (Host); a job-wide hang
	// verdict, or its record of leaving early, named it.
	remote bool
	// lostPeer quotes the failure's error where it says it lost a peer.
	lostPeer string
}

// Traceback lines shown in the summary: a longer traceback keeps its first
// and last lines (the exception is at the end) with a count of those left
// out.
const (
	tracebackHead = 8
	tracebackTail = 24
)

// FormatSummary renders the failures of the last attempt in the shape of
// torchrun's ChildFailedError block: the root cause (the first failure
// seen) and every other failure, each with its rank, host, exit code or
// signal, time, the worker's own error message and traceback, and where its
// logs are. A worker without an error file is told how to write one: with
// PyTorch's @record for a Python script, else in its own words.
func FormatSummary(e Entrypoint, failures []Failure) string {
	if len(failures) == 0 {
		return ""
	}
	title := e.Script + " FAILED"
	hint := noTracebackGo
	if e.RunsPython() || isPython(e.Script) {
		hint = noTracebackPython
	}
	blocks := make([]string, len(failures))
	width := len(title)
	for i, f := range failures {
		blocks[i] = formatFailure(i, f, hint)
		for _, l := range strings.Split(blocks[i], "\n") {
			width = max(width, len(l))
		}
	}
	width = min(width, 60)
	eq, dash := strings.Repeat("=", width), strings.Repeat("-", width)

	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%s\n%s\nFailures:\n", eq, title, dash)
	if len(failures) == 1 {
		b.WriteString("  <NO_OTHER_FAILURES>\n")
	}
	for _, blk := range blocks[1:] {
		b.WriteString(blk)
	}
	cause := "first observed failure"
	switch {
	case failures[0].Hung != "" && failures[0].blameless:
		cause = "a hang no rank can be blamed for; the lowest rank stands for the job"
	case failures[0].Hung != "":
		cause = "the rank that held the others up"
	case failures[0].Left != "":
		cause = "the rank that left while the others ran"
	}
	fmt.Fprintf(&b, "%s\nRoot Cause (%s):\n%s%s\n", dash, cause, blocks[0], eq)
	return b.String()
}

// What the summary says of a worker that wrote no error file and was not
// killed by a signal.
const (
	noTracebackPython = "none: decorate the script's main with torch.distributed.elastic.multiprocessing.errors.record to get one"
	noTracebackGo     = `none: the program wrote no error file; it may write {"message": "..."} to $TORCHELASTIC_ERROR_FILE before it exits`
)

func formatFailure(idx int, f Failure, noTraceback string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%d]:\n", idx)
	fmt.Fprintf(&b, "  time      : %s\n", f.Time.Format("2006-01-02_15:04:05.000"))
	fmt.Fprintf(&b, "  host      : %s\n", f.Host)
	fmt.Fprintf(&b, "  rank      : %d (local_rank: %d)\n", f.Rank, f.LocalRank)
	if f.Hung != "" {
		fmt.Fprintf(&b, "  hung      : %s\n", f.Hung)
	}
	if f.Left != "" {
		fmt.Fprintf(&b, "  left      : %s\n", f.Left)
	}
	pid := "unknown" + map[bool]string{true: ", on another node"}[f.remote]
	if f.PID != 0 {
		pid = strconv.Itoa(f.PID)
	}
	if f.Hung != "" {
		// It did not exit of itself: gorun stopped it, and exits ExitHung.
		fmt.Fprintf(&b, "  exitcode  : none: judged hung and stopped by gorun, which exits %d (pid: %s)\n", f.ExitCode, pid)
	} else if f.Signal != 0 {
		fmt.Fprintf(&b, "  exitcode  : %d (signal %d, %s; pid: %d)\n", f.ExitCode, int(f.Signal), SignalName(f.Signal), f.PID)
	} else if f.PID == 0 {
		fmt.Fprintf(&b, "  exitcode  : %d (pid: unknown%s)\n", f.ExitCode, map[bool]string{true: ", on another node"}[f.remote])
	} else {
		fmt.Fprintf(&b, "  exitcode  : %d (pid: %d)\n", f.ExitCode, f.PID)
	}
	switch {
	case f.ErrorFile != "" && f.Error != nil:
		fmt.Fprintf(&b, "  error_file: %s\n", f.ErrorFile)
	case f.ErrorFileProblem != "":
		fmt.Fprintf(&b, "  error_file: %s\n", f.ErrorFileProblem)
	case f.Error != nil:
		b.WriteString("  error_file: <read, not kept: no --log-dir>\n")
	default:
		b.WriteString("  error_file: <N/A>\n")
	}
	logs := "<console>"
	if len(f.Logs) > 0 {
		logs = strings.Join(f.Logs, ", ")
	}
	fmt.Fprintf(&b, "  logs      : %s\n", logs)
	switch {
	case f.Error != nil:
		fmt.Fprintf(&b, "  message   : %s\n", f.Error.Message)
		if tb := strings.TrimRight(f.Error.Traceback, "\n"); tb != "" {
			b.WriteString("  traceback : ")
			writeIndented(&b, trimLines(tb, tracebackHead, tracebackTail))
		}
	case f.Signal != 0:
		fmt.Fprintf(&b, "  traceback : Signal %d (%s) received by PID %d\n", int(f.Signal), SignalName(f.Signal), f.PID)
	case f.LastLine != "":
		fmt.Fprintf(&b, "  last line : %s\n", f.LastLine)
		if notStarted(f.LastLine) {
			noTraceback = "none: the interpreter could not start the script (its last line above)"
		}
		fmt.Fprintf(&b, "  traceback : %s\n", noTraceback)
	default:
		fmt.Fprintf(&b, "  traceback : %s\n", noTraceback)
	}
	return b.String()
}

// notStarted says whether a worker's last line is Python's own refusal
// to start the script: a missing file or module.
func notStarted(line string) bool {
	return strings.Contains(line, "can't open file") || strings.Contains(line, "No module named") ||
		strings.Contains(line, "Error while finding module specification")
}

// lastLine is the last line of text that is not empty, cut to 300 bytes.
func lastLine(text string) string {
	lines := strings.Split(strings.TrimRight(text, "\n "), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if len(l) > 300 {
		l = l[:300] + "..."
	}
	return l
}

// trimLines keeps the first head and last tail lines of s, marking the
// cut.
func trimLines(s string, head, tail int) []string {
	lines := strings.Split(s, "\n")
	if len(lines) <= head+tail+1 {
		return lines
	}
	out := append([]string{}, lines[:head]...)
	out = append(out, fmt.Sprintf("... %d lines not shown ...", len(lines)-head-tail))
	return append(out, lines[len(lines)-tail:]...)
}

// writeIndented writes lines after a field label: the first on the label's
// line, the others indented by two more spaces than the fields.
func writeIndented(b *strings.Builder, lines []string) {
	for i, l := range lines {
		if i > 0 {
			b.WriteString("    ")
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
}
