package launcher

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/launcher/probe"
	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/watchdog"
)

// fakeArrivals is a rendezvous that hands the comparison the reports a
// test gives it.
type fakeArrivals struct {
	mu   sync.Mutex
	put  [][]byte
	feed chan rendezvous.NodeReport
}

func (f *fakeArrivals) ShareArrivals(_ context.Context, _ rendezvous.Round, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.put = append(f.put, b)
	return nil
}

func (f *fakeArrivals) WatchArrivals(context.Context, rendezvous.Round) <-chan rendezvous.NodeReport {
	return f.feed
}

// arrivalsOf returns 40 collectives of the default group, 50 ms apart,
// the node's first rank lateBy after the others on each.
func arrivalsOf(lateBy time.Duration) []probe.Arrival {
	base := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC).UnixNano()
	var out []probe.Arrival
	for seq := range int64(40) {
		out = append(out, probe.Arrival{Seq: seq, TimeNs: base + seq*int64(50*time.Millisecond) + int64(lateBy)})
	}
	return out
}

// TestNodeStragglers: a node whose ranks all come late is named, with its
// event for the whole node; across hosts whose clocks are not synchronized
// nothing is compared, and gorun says why.
func TestNodeStragglers(t *testing.T) {
	late, onTime := arrivalsOf(100*time.Millisecond), arrivalsOf(0)
	cases := []struct {
		name   string
		boots  [2]string
		synced bool
		want   string
		not    string
	}{
		{"one host", [2]string{"b", "b"}, false, "node 1 (host1) is a straggler: all its ranks came late together (its first one after every other node's first) in 20 of the last 20 sampled collectives of group 0, 100ms after the next-latest node (median); since collective #20", "not compared"},
		{"two synchronized hosts", [2]string{"a", "b"}, true, "node 1 (host1) is a straggler", "not compared"},
		{"a host not synchronized", [2]string{"a", "b"}, false, "the nodes' arrival times are not compared: a node's clock is not synchronized", "is a straggler"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := logrus.New()
			log.SetOutput(&logs)
			var events []*goodput.StragglerEvent
			att := &attempt{cfg: &Config{Log: log}}
			att.onStraggler = func(s probe.Straggler, node string, recovered bool) {
				events = append(events, goodput.NewStragglerEvent(s, node, recovered))
			}
			h := &lifeWatch{att: att}
			f := &fakeArrivals{feed: make(chan rendezvous.NodeReport, 2)}
			n := newNodeWatch(f, rendezvous.Round{GroupWorldSize: 2}, "host0", time.Now())
			for node, arr := range [][]probe.Arrival{onTime, late} {
				b, _ := json.Marshal(nodeArrivals{Version: nodeArrivalsVersion, Host: "host" + string(rune('0'+node)), BootID: tc.boots[node], Synced: tc.synced, ClockErrorUs: 500, Arrivals: arr})
				f.feed <- rendezvous.NodeReport{GroupRank: node, Value: b}
			}
			close(f.feed)
			n.compare(context.Background(), h)
			if !strings.Contains(logs.String(), tc.want) || strings.Contains(logs.String(), tc.not) {
				t.Errorf("log lacks %q or has %q:\n%s", tc.want, tc.not, logs.String())
			}
			if tc.not == "is a straggler" {
				return
			}
			if len(events) != 1 || events[0].Node != "node 1 (host1)" || events[0].Rank != -1 {
				t.Errorf("events %+v; want node 1 (host1), rank -1", events)
			}
		})
	}
}

// TestNodeWatchSamples: the samples are the sequence numbers that are
// multiples of the stride; after a period the stride follows the pace
// (about samplesPerShare a period) and a report goes to the sender.
func TestNodeWatchSamples(t *testing.T) {
	start := time.Now()
	n := newNodeWatch(&fakeArrivals{}, rendezvous.Round{GroupWorldSize: 2}, "host0", start)
	snap := func(rank int, from, to int64) probe.Snapshot {
		s := probe.Snapshot{Rank: &rank, Recorder: &probe.Recorder{}}
		for seq := from; seq < to; seq++ {
			s.Recorder.Entries = append(s.Recorder.Entries, watchdog.Entry{CollectiveSeqID: seq, TimeCreatedNs: 1 + seq})
		}
		return s
	}
	n.sample(start, []probe.Snapshot{snap(0, 0, 10), snap(1, 0, 9)})
	if len(n.samples) != 9 || n.stride != 1 {
		t.Fatalf("%d samples, stride %d; want the 9 collectives both ranks entered, stride 1", len(n.samples), n.stride)
	}
	// 640 collectives in the period: one sample in 20 gives 32 a period;
	// the stride is the power of two at least 20.
	n.sample(start.Add(n.every), []probe.Snapshot{snap(0, 586, 650), snap(1, 586, 650)})
	if n.stride != 32 {
		t.Errorf("stride %d after 640 collectives in a period; want 32", n.stride)
	}
	select {
	case rep := <-n.reports:
		if len(rep.Arrivals) != maxSamples || rep.Arrivals[len(rep.Arrivals)-1].Seq != 649 {
			t.Errorf("report of %d arrivals ending %+v; want %d ending at #649", len(rep.Arrivals), rep.Arrivals[len(rep.Arrivals)-1], maxSamples)
		}
	default:
		t.Fatal("no report after a period")
	}
	n.sample(start.Add(n.every+time.Second), []probe.Snapshot{snap(0, 650, 714), snap(1, 650, 714)})
	for _, a := range n.samples[len(n.samples)-2:] {
		if a.Seq%32 != 0 {
			t.Errorf("sample #%d; want multiples of 32 only", a.Seq)
		}
	}
}

func TestPow2AtLeast(t *testing.T) {
	for v, want := range map[int64]int64{-3: 1, 0: 1, 1: 1, 2: 2, 3: 4, 20: 32, 32: 32, 33: 64} {
		if got := pow2AtLeast(v); got != want {
			t.Errorf("pow2AtLeast(%d) = %d; want %d", v, got, want)
		}
	}
}
