package launcher

import (
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/sirupsen/logrus"
)

func TestPlaceLeft(t *testing.T) {
	at := time.Date(2026, 12, 3, 13, 0, 0, 0, time.UTC)
	left := func() []Failure {
		return []Failure{{Rank: 0, Time: at, Left: "exited 0 at 13:00:00.000 while the other ranks ran"}}
	}
	failed := func(msg string) []Failure {
		f := Failure{Rank: 1, ExitCode: 1, Time: at.Add(time.Second)}
		if msg != "" {
			f.Error = &ErrorReport{Message: msg}
		}
		return []Failure{f, {Rank: 2, ExitCode: 1, Time: at.Add(2 * time.Second)}}
	}
	gloo := "[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:57575. This is typically caused by a remote worker crashing."
	cases := []struct {
		name     string
		failures []Failure
		tail     string
		ranks    []int  // the order of the result
		leftSays string // in the left worker's Left, when it is kept
	}{
		{"its own error in the error file", failed("RuntimeError: sad because i throw"), "", []int{1, 2}, ""},
		{"its own error on stderr", failed(""), "Traceback (most recent call last):\nValueError: bad batch\n", []int{1, 2}, ""},
		{"gloo lost its peer, on stderr", failed(""), "Traceback:\n" + gloo + "\n", []int{0, 1, 2}, `rank 1's error says it lost a peer: "RuntimeError: Connection closed by peer [127.0.0.1]:57575.`},
		{"a lost store in the error file", failed("torch.distributed.DistNetworkError: failed to recv, got 0 bytes"), "", []int{0, 1, 2}, "lost a peer"},
		{"gorun's comm", failed(""), "ddp: all-reduce #20: the peer closed its connection (it was stopped, or it exited)\n", []int{0, 1, 2}, "lost a peer"},
		{"no error text at all", failed(""), "", []int{1, 0, 2}, "no error text gorun could read, so whether its failure came of this is unknown"},
		{"a hang's verdict stays first", []Failure{{Rank: 1, Hung: "never entered all_reduce #20"}}, gloo, []int{1}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := placeLeft(tc.failures, left(), func(Failure) string { return tc.tail })
			var ranks []int
			for _, f := range got {
				ranks = append(ranks, f.Rank)
				if f.Left != "" && !strings.Contains(f.Left, tc.leftSays) {
					t.Errorf("left: %q, want it to contain %q", f.Left, tc.leftSays)
				}
			}
			if len(ranks) != len(tc.ranks) {
				t.Fatalf("ranks %v, want %v", ranks, tc.ranks)
			}
			for i := range ranks {
				if ranks[i] != tc.ranks[i] {
					t.Fatalf("ranks %v, want %v", ranks, tc.ranks)
				}
			}
		})
	}
}

func TestOutputTailKeepsTheEnd(t *testing.T) {
	var tail outputTail
	line := strings.Repeat("x", 1000) + "\n"
	for range 20 {
		tail.Write([]byte(line))
	}
	tail.Write([]byte("RuntimeError: the last words\n"))
	got := tail.String()
	if len(got) != stderrTailSize || !strings.HasSuffix(got, "RuntimeError: the last words\n") {
		t.Fatalf("tail of %d bytes ending %q, want %d bytes ending with the last line", len(got), got[len(got)-40:], stderrTailSize)
	}
}

// TestLostNodeTurnsAFailureIntoAnInterruption: a failure that says it
// lost a peer is a lost node's consequence when the round then ends
// without a failure; not when another node's workers failed, nor when no
// round's end can come (one node), nor for a failure of its own.
func TestLostNodeTurnsAFailureIntoAnInterruption(t *testing.T) {
	lost := rendezvous.Event{Reason: "node n2 at 10.0.0.3 was lost: its lease ended"}
	failed := rendezvous.Event{Reason: "failure: rank 4 on n3 exited with code 1", Failure: true}
	cases := []struct {
		name     string
		lostPeer string
		late     *rendezvous.Event
		event    *rendezvous.Event
		noWatch  bool
		want     outcomeKind
	}{
		{"the node's loss comes after the failure", "Connection closed by peer", nil, &lost, false, outcomeInterrupted},
		{"it came while the workers stopped", "Connection closed by peer", &lost, nil, false, outcomeInterrupted},
		{"another node's workers failed", "Connection closed by peer", nil, &failed, false, outcomeFailed},
		{"a failure of its own", "", nil, &lost, false, outcomeFailed},
		{"one node: no round's end", "Connection closed by peer", nil, nil, true, outcomeFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := &Agent{cfg: Config{Log: logrus.New()}}
			out := outcome{kind: outcomeFailed, late: tc.late, failures: []Failure{{Rank: 1, ExitCode: 1, lostPeer: tc.lostPeer}}}
			var events chan rendezvous.Event
			if !tc.noWatch {
				events = make(chan rendezvous.Event, 1)
				if tc.event != nil {
					events <- *tc.event
				}
			}
			a.lostNode(&out, events)
			if out.kind != tc.want {
				t.Errorf("outcome %v; want %v", out.kind, tc.want)
			}
		})
	}
}
