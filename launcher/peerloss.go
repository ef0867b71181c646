package launcher

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
)

// stderrTailSize is how much of the end of a worker's stderr gorun keeps
// to read why it failed when it wrote no error file.
const stderrTailSize = 8 << 10

// outputTail keeps the last stderrTailSize bytes written to it. Safe for
// a pump writing while the agent reads.
type outputTail struct {
	mu  sync.Mutex
	buf []byte
}

// Write keeps the end of p, dropping the oldest bytes past the size.
func (t *outputTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - stderrTailSize; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns what is kept.
func (t *outputTail) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// tailWriter writes to the tail first (it never fails), then to the
// stream's log file, if any.
type tailWriter struct {
	tail *outputTail
	file io.Writer
}

func (w tailWriter) Write(p []byte) (int, error) {
	w.tail.Write(p)
	if w.file == nil {
		return len(p), nil
	}
	return w.file.Write(p)
}

// failureCause is what gorun can tell of why a worker failed, from its
// error file and the end of its stderr, when a rank had exited 0 before.
type failureCause int

const (
	// causeUnseen: the worker left no error text gorun could read.
	causeUnseen failureCause = iota
	// causeOwn: its error text says nothing of a lost peer: it failed on
	// its own, and a rank that exited 0 before it only finished first.
	causeOwn
	// causeLostPeer: its error text says a peer went away (a connection
	// closed or reset, a timeout waiting on a peer).
	causeLostPeer
)

// lostPeerLine returns the first line of text that says a peer of the
// collective or the store went away, as PyTorch (gloo, NCCL, TCPStore)
// and gorun's comm word it, or "".
func lostPeerLine(text string) string {
	marks := [...]string{
		"connection closed by peer",   // gloo
		"connection reset by peer",    // gloo, TCPStore
		"broken pipe",                 // a write to a peer that left
		"remote process exited",       // NCCL
		"watchdog caught collective",  // NCCL's timeout on a peer
		"timed out waiting",           // gloo's recv timeout
		"distnetworkerror",            // TCPStore
		"failed to recv",              // TCPStore
		"the peer closed its",         // gorun's comm
		"the peer is stuck or gone",   // gorun's comm
		"connection refused",          // the store's host left
		"socket timeout",              // c10d
		"peer has been disconnected",  // gloo (older)
		"read error: connection lost", // gloo (older)
	}
	for _, line := range strings.Split(text, "\n") {
		low := strings.ToLower(line)
		for _, m := range marks {
			if strings.Contains(low, m) {
				return strings.TrimSpace(line)
			}
		}
	}
	return ""
}

// causeOf reads why f failed from its error file's message and
// traceback and from the end of its stderr. quote is the line that says
// a peer was lost (causeLostPeer).
func causeOf(f Failure, stderrTail string) (cause failureCause, quote string) {
	var text strings.Builder
	if f.Error != nil {
		text.WriteString(f.Error.Message + "\n" + f.Error.Traceback + "\n")
	}
	text.WriteString(stderrTail)
	if strings.TrimSpace(text.String()) == "" {
		return causeUnseen, ""
	}
	if q := lostPeerLine(text.String()); q != "" {
		return causeLostPeer, q
	}
	return causeOwn, ""
}

// placeLeft decides where the workers that exited 0 before the first
// failure (left) go in the ordered failures. They lead when the first
// failure says it lost a peer; they are left out when it failed on its
// own (finishing first is no failure); when gorun saw no error text of
// the first failure, they follow it, saying that gorun cannot tell.
func placeLeft(failures, left []Failure, tailOf func(Failure) string) []Failure {
	if len(left) == 0 || len(failures) == 0 || failures[0].Hung != "" {
		return failures
	}
	first := failures[0]
	cause, quote := causeOf(first, tailOf(first))
	switch cause {
	case causeLostPeer:
		quote = shortQuote(quote)
		for i := range left {
			left[i].Left += fmt.Sprintf("; rank %d's error says it lost a peer: %q", first.Rank, quote)
		}
		return append(left, failures...)
	case causeOwn:
		return failures
	}
	for i := range left {
		left[i].Left += fmt.Sprintf("; rank %d left no error text gorun could read, so whether its failure came of this is unknown", first.Rank)
	}
	out := append([]Failure{first}, left...)
	return append(out, failures[1:]...)
}

// shortQuote trims a quoted error line for the summary: PyTorch 2.x's
// "[rankN]: " prefix and the C++ source position ("[.../pair.cc:561] ")
// go, and the rest is cut to 160 bytes.
func shortQuote(q string) string {
	const maxQuote = 160
	q = regexp.MustCompile(`^\[rank\d+\]:\s*`).ReplaceAllString(q, "")
	q = regexp.MustCompile(`\[[^\]\s]*\.(cc|cpp|c|h|hpp):\d+\]\s*`).ReplaceAllString(q, "")
	if len(q) > maxQuote {
		q = q[:maxQuote] + "..."
	}
	return q
}
