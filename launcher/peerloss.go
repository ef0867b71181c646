package launcher

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher/probe"
	"github.com/gorun-dev/gorun/rendezvous"
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

// placeLeft reads why the first of the ordered failures failed (marking
// it when it lost a peer) and decides where the workers that exited 0
// before it (left) go. They lead when the first
// failure says it lost a peer; they are left out when it failed on its
// own (finishing first is no failure); when gorun saw no error text of
// the first failure, they follow it, saying that gorun cannot tell.
func placeLeft(failures, left []Failure, tailOf func(Failure) string) []Failure {
	if len(failures) == 0 || failures[0].Hung != "" {
		return failures
	}
	cause, quote := causeOf(failures[0], tailOf(failures[0]))
	if cause == causeLostPeer {
		// Marked: a rank of another node may have left (remoteLeft), or
		// a node been lost (Agent.lostNode).
		failures[0].lostPeer = shortQuote(quote)
	}
	if len(left) == 0 {
		return failures
	}
	first := failures[0]
	switch cause {
	case causeLostPeer:
		for i := range left {
			left[i].Left += fmt.Sprintf("; rank %d's error says it lost a peer: %q", first.Rank, first.lostPeer)
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

// leftBefore returns, as failures, the workers that exited 0 before t
// while the others ran (placeLeft decides whether they lead).
func (att *attempt) leftBefore(t time.Time) []Failure {
	var out []Failure
	for _, w := range att.workers {
		if w.leftAt.IsZero() || w.leftAt.After(t) {
			continue
		}
		out = append(out, Failure{
			LocalRank: w.spec.LocalRank, Rank: w.spec.Rank, PID: w.proc.Pid, ExitCode: 0, Time: w.leftAt, Host: att.cfg.Hostname,
			Left: fmt.Sprintf("%s; the first failure came %v after it left", leftText(w), t.Sub(w.leftAt).Round(time.Millisecond)),
		})
	}
	return out
}

// leftText says what a worker that exited 0 while the others ran did.
func leftText(w *worker) string {
	done := ""
	if f, _ := lookupEnv(w.spec.Env, workerenv.ProbeFile); f != "" {
		if s, ok, err := probe.Read(f); err == nil && ok && s.StepHook {
			done = fmt.Sprintf(" after %d optimizer steps", s.Steps)
		}
	}
	return fmt.Sprintf("exited 0%s at %s while the other ranks ran", done, w.leftAt.Format("15:04:05.000"))
}

// leftRecordTimeout bounds recording a rank that left; leftWait bounds
// the wait for another node's record once a rank lost its peer.
const (
	leftRecordTimeout = 5 * time.Second
	leftWait          = 2 * time.Second
)

// recordLeft records w, which just exited 0 while the others ran, for
// the other nodes, in the background (att.records owns it).
func (att *attempt) recordLeft(w *worker) {
	if att.leftRec == nil {
		return
	}
	l := rendezvous.LeftRank{Rank: w.spec.Rank, LocalRank: w.spec.LocalRank, PID: w.proc.Pid, Host: att.cfg.Hostname, At: w.leftAt, Left: leftText(w)}
	att.record(l)
}

// recordNodeDone records, for the other nodes, that every worker of this
// node exited 0 at t: should the other nodes' ranks then lose their peers,
// this node's ranks left while they ran.
func (att *attempt) recordNodeDone(t time.Time) {
	if att.leftRec == nil || len(att.workers) == 0 {
		return
	}
	lo, hi := att.workers[0].spec.Rank, att.workers[0].spec.Rank
	for _, w := range att.workers {
		lo, hi = min(lo, w.spec.Rank), max(hi, w.spec.Rank)
	}
	ranks := fmt.Sprintf("ranks %d-%d", lo, hi)
	if lo == hi {
		ranks = fmt.Sprintf("rank %d", lo)
	}
	l := rendezvous.LeftRank{Rank: lo, LocalRank: 0, Host: att.cfg.Hostname, At: t,
		Left: fmt.Sprintf("exited 0 at %s, all of node %d (%s: its part done), while other nodes' ranks ran", t.Format("15:04:05.000"), att.round.GroupRank, ranks)}
	att.record(l)
}

// record records l for the other nodes, in the background (att.records
// owns it).
func (att *attempt) record(l rendezvous.LeftRank) {
	att.records.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), leftRecordTimeout)
		defer cancel()
		if err := att.leftRec.RecordLeft(ctx, att.round, l); err != nil {
			att.cfg.Log.Debugf("%v", err)
		}
	})
}

// remoteLeft puts first the ranks of other nodes that left before the
// first failure, when that failure says it lost a peer and no rank of
// this node left.
func (att *attempt) remoteLeft(ctx context.Context, failures []Failure) []Failure {
	if att.leftRec == nil || len(failures) == 0 || failures[0].lostPeer == "" {
		return failures
	}
	first := failures[0]
	ls, err := att.leftRec.LeftRanks(ctx, att.round, leftWait)
	if err != nil {
		att.cfg.Log.Debugf("the ranks that left on other nodes: %v", err)
		return failures
	}
	var lead []Failure
	for _, l := range ls {
		if l.Host == att.cfg.Hostname && slices.ContainsFunc(att.workers, func(w *worker) bool { return w.spec.Rank == l.Rank }) {
			continue // this node's own: placeLeft saw it
		}
		lead = append(lead, Failure{Rank: l.Rank, LocalRank: l.LocalRank, PID: l.PID, Host: l.Host, Time: l.At, remote: true,
			Left: fmt.Sprintf("%s (on another node); rank %d's error says it lost a peer: %q", l.Left, first.Rank, first.lostPeer)})
	}
	slices.SortFunc(lead, func(a, b Failure) int { return a.Time.Compare(b.Time) })
	return append(lead, failures...)
}
