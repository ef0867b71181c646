package chaos

import (
	"bufio"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// line is one line an agent wrote, with when it was read.
type line struct {
	at     time.Time
	node   int
	stderr bool
	text   string
}

// events is everything the round's agents wrote, as it arrives.
type events struct {
	mu    sync.Mutex
	lines []line
}

// read adds r's lines, from node, until r ends.
func (e *events) read(r io.Reader, node int, stderr bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		e.mu.Lock()
		e.lines = append(e.lines, line{at: time.Now(), node: node, stderr: stderr, text: sc.Text()})
		e.mu.Unlock()
	}
}

// snapshot is the lines so far.
func (e *events) snapshot() []line {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lines[:len(e.lines):len(e.lines)]
}

var (
	// A training step, from bin/ddp ("step 3 loss=...") or the PyTorch
	// example ("step 3 loss 0.1234"), after gorun's "[default0]:".
	stepLine = regexp.MustCompile(`\]:step (\d+) loss`)
	// A worker start, from the wrapper every worker runs under.
	startLine = regexp.MustCompile(`\]:chaos: start node=(\d+) rank=(\d+) world=(\d+)`)
	// An agent stopping its workers: the round ended, or one failed.
	stopLine = regexp.MustCompile(`gorun: .*stopping the (other )?workers`)
	// The job's result, from global rank 0.
	finalLine = regexp.MustCompile(`\]:final loss=(\S+) checksum=(\S+) world=(\d+)`)
)

// firstAfter returns the time of the first line after t that re matches
// (zero if none).
func firstAfter(lines []line, t time.Time, re *regexp.Regexp) time.Time {
	for _, l := range lines {
		if !l.stderr && l.at.After(t) && re.MatchString(l.text) {
			return l.at
		}
	}
	return time.Time{}
}

// firstStderrAfter is firstAfter for the agents' own lines (stderr).
func firstStderrAfter(lines []line, t time.Time, re *regexp.Regexp) time.Time {
	for _, l := range lines {
		if l.stderr && l.at.After(t) && re.MatchString(l.text) {
			return l.at
		}
	}
	return time.Time{}
}

// lastMatch returns the time of the last line that re matches (zero if
// none).
func lastMatch(lines []line, re *regexp.Regexp) time.Time {
	for i := len(lines) - 1; i >= 0; i-- {
		if !lines[i].stderr && re.MatchString(lines[i].text) {
			return lines[i].at
		}
	}
	return time.Time{}
}

// final is the job's final line, if rank 0 printed one.
type final struct {
	loss, checksum float64
	world          int
	text           string
}

// finals lists every final line printed (one per completed attempt).
func finals(lines []line) []final {
	var out []final
	for _, l := range lines {
		if l.stderr {
			continue
		}
		m := finalLine.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		loss, err1 := strconv.ParseFloat(m[1], 64)
		sum, err2 := strconv.ParseFloat(m[2], 64)
		world, err3 := strconv.Atoi(m[3])
		if err1 == nil && err2 == nil && err3 == nil {
			out = append(out, final{loss, sum, world, strings.TrimSpace(l.text)})
		}
	}
	return out
}

// memberPid is the pid of node's store member, as its agent last said,
// 0 if it has not.
func memberPid(lines []line, node int) int {
	var log strings.Builder
	for _, l := range lines {
		if l.node == node && l.stderr {
			log.WriteString(l.text + "\n")
		}
	}
	return proctest.StoreMemberPid(log.String())
}

// transcript is every line of node, for a failure's report.
func transcript(lines []line, node int) string {
	var b strings.Builder
	var t0 time.Time
	for _, l := range lines {
		if t0.IsZero() {
			t0 = l.at
		}
		if l.node == node {
			b.WriteString(strconv.FormatFloat(l.at.Sub(t0).Seconds(), 'f', 2, 64) + "s " + l.text + "\n")
		}
	}
	return b.String()
}
