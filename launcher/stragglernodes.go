package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/clock"
	"github.com/gorun-dev/gorun/launcher/probe"
	"github.com/gorun-dev/gorun/rendezvous"
)

// The job-wide straggler watch's pace: each node sends its sampled
// arrivals every shareEvery (longer for many nodes: nodeShareCost per
// node, so that the store takes about 200 reports a second at most),
// about samplesPerShare of them, keeping the newest maxSamples.
const (
	shareEvery      = 5 * time.Second
	nodeShareCost   = 5 * time.Millisecond
	samplesPerShare = 32
	maxSamples      = 2 * samplesPerShare
)

// nodeArrivals is one node's report for the job-wide straggler watch.
type nodeArrivals struct {
	Version int    `json:"version"`
	Host    string `json:"host"`
	// BootID, Synced and ClockErrorUs describe the node's clock: arrival
	// times from two hosts compare only within their clocks' error.
	BootID       string `json:"boot_id"`
	Synced       bool   `json:"synced"`
	ClockErrorUs int64  `json:"clock_error_us"`
	// Arrivals are the newest sampled collectives of the default group
	// (sequence numbers that are multiples of a power of two, the same
	// on every node for the same pace), when the node's first rank
	// entered each.
	Arrivals []probe.Arrival `json:"arrivals"`
	// Steps, StepTimesNs and StepHook are the optimizer steps of the
	// node's lowest rank (in step with the others).
	Steps       int64   `json:"steps"`
	StepTimesNs []int64 `json:"step_times_ns"`
	StepHook    bool    `json:"step_hook"`
}

// nodeArrivalsVersion is the form of nodeArrivals this gorun writes and
// reads.
const nodeArrivalsVersion = 1

// nodeArrivalsSetup is what an attempt needs for the job-wide straggler
// watch: the rendezvous and the round.
type nodeArrivalsSetup struct {
	sharer ArrivalSharer
	round  rendezvous.Round
}

// nodeWatch is the attempt's part in the job-wide straggler watch: it
// samples this node's arrivals on the monitor's goroutine (sample), and
// its goroutines send them and, on the round's group rank 0, compare
// every node's.
type nodeWatch struct {
	sharer ArrivalSharer
	round  rendezvous.Round
	host   string
	clock  clock.State
	every  time.Duration
	// On the monitor's goroutine: the sampling.
	next    time.Time
	stride  int64 // sequence numbers sampled are multiples of it
	queued  int64 // the newest sequence number sampled
	rateSeq int64 // the newest sequence number at rateAt
	rateAt  time.Time
	samples []probe.Arrival
	reports chan nodeArrivals // to the sender; the newest replaces one not taken
}

func newNodeWatch(sharer ArrivalSharer, round rendezvous.Round, host string, now time.Time) *nodeWatch {
	every := max(shareEvery, time.Duration(round.GroupWorldSize)*nodeShareCost)
	return &nodeWatch{sharer: sharer, round: round, host: host, clock: clock.Read(), every: every,
		next: now.Add(every), stride: 1, queued: -1, reports: make(chan nodeArrivals, 1)}
}

// start starts the sender and, on group rank 0, the comparison, under
// ctx; wg owns them.
func (n *nodeWatch) start(ctx context.Context, h *lifeWatch) {
	h.wg.Go(func() { n.send(ctx, h) })
	if n.round.GroupRank == 0 {
		h.wg.Go(func() { n.compare(ctx, h) })
	}
}

// sample takes this node's newest snapshots (one per running rank) at
// now, and every n.every hands the newest samples to the sender.
func (n *nodeWatch) sample(now time.Time, snaps []probe.Snapshot) {
	arr := probe.FirstArrivals(snaps, probe.RecorderSize)
	if len(arr) == 0 {
		return
	}
	newest := arr[len(arr)-1].Seq
	if n.rateAt.IsZero() {
		n.rateSeq, n.rateAt = newest, now
	}
	for _, a := range arr {
		if a.Seq > n.queued && a.Seq%n.stride == 0 {
			n.samples = append(n.samples, a)
			n.queued = a.Seq
		}
	}
	n.samples = n.samples[max(0, len(n.samples)-maxSamples):]
	if now.Before(n.next) {
		return
	}
	n.next = now.Add(n.every)
	// The stride for the next period: about samplesPerShare samples in
	// it at the pace of the last one. A power of two, so that nodes that
	// measured a slightly different pace still share most samples.
	if el := now.Sub(n.rateAt); el > 0 {
		perShare := float64(newest-n.rateSeq) * float64(n.every) / float64(el)
		n.stride = pow2AtLeast(int64(perShare / samplesPerShare))
	}
	n.rateSeq, n.rateAt = newest, now
	rep := nodeArrivals{Version: nodeArrivalsVersion, Host: n.host, BootID: n.clock.BootID, Synced: n.clock.Synced,
		ClockErrorUs: n.clock.Error.Microseconds(), Arrivals: append([]probe.Arrival(nil), n.samples...)}
	for _, s := range snaps {
		if s.StepHook {
			rep.Steps, rep.StepTimesNs, rep.StepHook = s.Steps, append([]int64(nil), s.StepTimesNs...), true
			break
		}
	}
	select {
	case <-n.reports:
	default:
	}
	n.reports <- rep
}

// pow2AtLeast is the smallest power of two at least v (1 for v < 1).
func pow2AtLeast(v int64) int64 {
	if v <= 1 {
		return 1
	}
	return 1 << bits.Len64(uint64(v-1))
}

// send puts each report in the store.
func (n *nodeWatch) send(ctx context.Context, h *lifeWatch) {
	failed := false
	for {
		select {
		case <-ctx.Done():
			return
		case rep := <-n.reports:
			b, _ := json.Marshal(rep)
			if err := n.sharer.ShareArrivals(ctx, n.round, b); err != nil {
				if !failed && ctx.Err() == nil {
					h.att.cfg.Log.Warnf("%v", err)
				}
				failed = true
				continue
			}
			failed = false
		}
	}
}

// compare reads every node's reports and names the nodes whose ranks
// enter the default group's collectives last, persistently (the rules of
// probe.Stragglers, with the nodes as its ranks and the lag raised by the
// clocks' uncertainty).
func (n *nodeWatch) compare(ctx context.Context, h *lifeWatch) {
	log := h.att.cfg.Log
	nodes := make([]int, n.round.GroupWorldSize)
	for i := range nodes {
		nodes[i] = i
	}
	strag := probe.NewStragglers(nodes)
	clocks := make([]clock.State, n.round.GroupWorldSize)
	seen := make([]bool, n.round.GroupWorldSize)
	hosts := make([]string, n.round.GroupWorldSize)
	saidClock, saidForm := false, false
	for rep := range n.sharer.WatchArrivals(ctx, n.round) {
		var a nodeArrivals
		if json.Unmarshal(rep.Value, &a) != nil || a.Version != nodeArrivalsVersion {
			if !saidForm {
				saidForm = true
				log.Warnf("straggler watch: node %d's arrivals are in a form this gorun does not read (another version?)", rep.GroupRank)
			}
			continue
		}
		node := rep.GroupRank
		seen[node], hosts[node] = true, a.Host
		clocks[node] = clock.State{BootID: a.BootID, Synced: a.Synced, Error: time.Duration(a.ClockErrorUs) * time.Microsecond}
		known := clocks[:0:0]
		for i, c := range clocks {
			if seen[i] {
				known = append(known, c)
			}
		}
		d, unsynced, ok := clock.Uncertainty(known)
		if !ok {
			if !saidClock {
				saidClock = true
				log.Warnf("straggler watch: the nodes' arrival times are not compared: a node's clock is not synchronized (adjtimex says so; run NTP or PTP on every node), and times read on different hosts are then not comparable (node %d of those seen)", unsynced)
			}
			continue
		}
		strag.SetMinLag(probe.StragglerMinLag + d)
		strag.Observe(probe.NodeSnapshot(node, a.Arrivals, probe.Snapshot{Steps: a.Steps, StepTimesNs: a.StepTimesNs, StepHook: a.StepHook}))
		named, recovered := strag.Check()
		for _, s := range named {
			log.Warnf("straggler watch: %s", nodeStragglerText(s, hosts[s.Rank]))
			h.nodeStraggler(s, hosts[s.Rank], false)
		}
		for _, s := range recovered {
			log.Infof("straggler watch: node %d (%s) no longer enters collectives last", s.Rank, hosts[s.Rank])
			h.nodeStraggler(s, hosts[s.Rank], true)
		}
	}
}

// nodeStragglerText says it for a log line; s.Rank is the node's group
// rank.
func nodeStragglerText(s probe.Straggler, host string) string {
	step := ""
	if s.Step >= 0 {
		step = fmt.Sprintf(", step %d", s.Step)
	}
	return fmt.Sprintf("node %d (%s) is a straggler: all its ranks came late together (its first one after every other node's first) in %d of the last %d sampled collectives of group 0, %v after the next-latest node (median); since collective #%d at %s%s",
		s.Rank, host, s.Late, s.Window, s.Lag.Round(time.Millisecond), s.Since, s.SinceTime.Format("15:04:05.000"), step)
}

// nodeStraggler records a straggling node (s.Rank its group rank) for
// the goodput report; the event's rank is -1: the whole node.
func (h *lifeWatch) nodeStraggler(s probe.Straggler, host string, recovered bool) {
	if h.att.onStraggler == nil {
		return
	}
	node := fmt.Sprintf("node %d (%s)", s.Rank, host)
	s.Rank = -1
	h.att.onStraggler(s, node, recovered)
}
