package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gorun-dev/gorun/launcher/probe"
	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/watchdog"
)

// jobHang is the attempt's part in the job-wide hang watch: its round and
// the rendezvous that carries the votes.
type jobHang struct {
	voter HangVoter
	round rendezvous.Round
}

// shareWait bounds the wait for the other nodes' evidence: each gathers
// its own for evidenceWait at most, after a declaration that reaches them
// within a watch's latency.
const shareWait = evidenceWait + 3*time.Second

// maxEvidence bounds one node's evidence in the store (etcd takes 1.5 MiB
// a request): past it, the flight-recorder dumps go, then the recorders
// in the snapshots.
const maxEvidence = 1 << 20

// nodeEvidence is what one node sends the others once the round is
// declared hung.
type nodeEvidence struct {
	Version int             `json:"version"`
	Host    string          `json:"host"`
	Ranks   []rankEvidence  `json:"ranks"`
	Dumps   []watchdog.Dump `json:"dumps,omitempty"`
}

// nodeEvidenceVersion is the form of nodeEvidence this gorun writes and
// reads.
const nodeEvidenceVersion = 1

// rankEvidence is one rank's part: what probe.Judge reads, and where the
// rank ran, for the summary of a node that does not run it.
type rankEvidence struct {
	Rank      int             `json:"rank"`
	LocalRank int             `json:"local_rank"`
	PID       int             `json:"pid"`
	Exited    bool            `json:"exited,omitempty"`
	ExitCode  int             `json:"exit_code,omitempty"`
	ExitedAt  time.Time       `json:"exited_at,omitzero"`
	Snapshot  *probe.Snapshot `json:"snapshot,omitempty"`
	Stale     bool            `json:"stale,omitempty"`
}

// voteState is this node's state for the vote: quiet, and cause when its
// own ranks show why (it then declares the hang).
type voteState struct {
	quiet bool
	cause string
	// ranks are the attempt's ranks, with those that left, read on the
	// monitor's goroutine.
	ranks []probe.Rank
}

// startVoting starts the goroutine that carries this node's votes to the
// rendezvous and, once the round is declared hung, gathers, shares and
// judges the evidence.
func (h *lifeWatch) startVoting(job *jobHang) {
	h.job = job
	h.votes = make(chan voteState, 1)
	h.wg.Go(func() { h.vote(h.ctx) })
}

// sendVote hands the newest state to the voting goroutine, replacing one
// it has not taken yet.
func (h *lifeWatch) sendVote(s voteState) {
	select {
	case <-h.votes:
	default:
	}
	h.votes <- s
}

func (h *lifeWatch) vote(ctx context.Context) {
	job, log := h.job, h.att.cfg.Log
	declared := job.voter.WatchHung(ctx, job.round)
	quiet, told, warned := false, false, false
	var ranks []probe.Rank
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-h.votes:
			if s.ranks != nil {
				ranks = s.ranks
			}
			// The cause first: the declaration names it before the
			// votes could make the round hung without it.
			if s.cause != "" && !told {
				told = true
				why := fmt.Sprintf("no rank of node %d (%s) showed a sign of life, and %s", job.round.GroupRank, h.att.cfg.Hostname, s.cause)
				if _, err := job.voter.DeclareHung(ctx, job.round, why); err != nil {
					log.Warnf("%v", err)
					told = false
				}
			}
			if s.quiet == quiet {
				continue
			}
			if err := job.voter.VoteHang(ctx, job.round, s.quiet); err != nil {
				log.Warnf("%v", err)
				continue
			}
			quiet = s.quiet
			if quiet && s.cause == "" && !warned {
				warned = true
				log.Warnf("hang watch: no rank of this node showed a sign of life for %v; the job is hung only when every node's ranks are quiet too", h.timeout)
			}
		case d, ok := <-declared:
			if !ok {
				return
			}
			log.Errorf("hang watch: node %d declared the job hung: %s; gathering every node's evidence", d.By, d.Why)
			if ranks == nil {
				ranks = h.blankRanks()
			}
			h.judgeJob(ctx, d, ranks)
			return
		}
	}
}

// judgeJob gathers this node's evidence for the declaration d, shares it
// with the other nodes, judges the whole job's, and sends the verdict.
func (h *lifeWatch) judgeJob(ctx context.Context, d rendezvous.HangDeclared, ranks []probe.Rank) {
	att, job := h.att, h.job
	local := h.gather(ctx, d.ID, ranks)
	if ctx.Err() != nil {
		return
	}
	mine := nodeEvidence{Version: nodeEvidenceVersion, Host: att.cfg.Hostname}
	for i, w := range att.workers {
		r := local.ranks[i]
		ev := rankEvidence{Rank: r.Rank, LocalRank: w.spec.LocalRank, Exited: r.Exited, ExitCode: r.ExitCode, ExitedAt: r.ExitedAt, Stale: r.Stale}
		if w.proc != nil {
			ev.PID = w.proc.Pid
		}
		if r.Snapshot != nil {
			s := r.Snapshot.Trimmed()
			ev.Snapshot = &s
		}
		mine.Ranks = append(mine.Ranks, ev)
	}
	for _, dump := range local.dumps {
		mine.Dumps = append(mine.Dumps, watchdog.Trim(dump))
	}
	b := encodeEvidence(&mine)
	reports, err := job.voter.ShareHangEvidence(ctx, job.round, b, shareWait)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		att.cfg.Log.Warnf("hang watch: could not share the evidence with the other nodes (%v): judging from this node's alone", err)
		reports = [][]byte{b}
	}
	v := judgeEvidence(reports, job.round.GroupWorldSize)
	v.answered = local.answered
	v.idle = fmt.Sprintf("%s (--hang-timeout %v)", d.Why, h.timeout)
	select {
	case h.verdicts <- v:
	case <-ctx.Done():
	}
}

// encodeEvidence writes e as JSON within maxEvidence: the dumps go
// first, then the snapshots' recorders, then the stacks.
func encodeEvidence(e *nodeEvidence) []byte {
	b, _ := json.Marshal(e)
	if len(b) <= maxEvidence {
		return b
	}
	e.Dumps = nil
	b, _ = json.Marshal(e)
	for i := range e.Ranks {
		if len(b) <= maxEvidence {
			break
		}
		if s := e.Ranks[i].Snapshot; s != nil {
			s.Recorder = nil
			b, _ = json.Marshal(e)
		}
	}
	for i := range e.Ranks {
		if len(b) <= maxEvidence {
			break
		}
		e.Ranks[i].Snapshot = nil
		b, _ = json.Marshal(e)
	}
	return b
}

// judgeEvidence merges the nodes' evidence and judges it: the verdict's
// remote failures say where each root rank ran. A report that does not
// read (another gorun's form) is left out and said.
func judgeEvidence(reports [][]byte, nodes int) hangVerdict {
	var ranks []probe.Rank
	var dumps []watchdog.Dump
	where := map[int]rankEvidence{}
	hosts := map[int]string{}
	unread := 0
	for _, rep := range reports {
		var e nodeEvidence
		if json.Unmarshal(rep, &e) != nil || e.Version != nodeEvidenceVersion {
			unread++
			continue
		}
		for _, r := range e.Ranks {
			if _, dup := where[r.Rank]; dup {
				continue
			}
			where[r.Rank], hosts[r.Rank] = r, e.Host
			ranks = append(ranks, probe.Rank{Rank: r.Rank, Exited: r.Exited, ExitCode: r.ExitCode, ExitedAt: r.ExitedAt, Snapshot: r.Snapshot, Stale: r.Stale})
		}
		dumps = append(dumps, e.Dumps...)
	}
	slices.SortFunc(ranks, func(a, b probe.Rank) int { return a.Rank - b.Rank })
	v := hangVerdict{Verdict: probe.Judge(ranks, dumps)}
	if got := len(reports) - unread; got < nodes {
		v.Lines = append(v.Lines, fmt.Sprintf("the evidence of %d of the %d nodes came in; the verdict reads theirs alone", got, nodes))
	}
	if unread > 0 {
		v.Lines = append(v.Lines, fmt.Sprintf("%d node(s) sent evidence in a form this gorun does not read (another version?)", unread))
	}
	for _, r := range v.Root {
		if ev, ok := where[r]; ok {
			v.remote = append(v.remote, Failure{Rank: r, LocalRank: ev.LocalRank, PID: ev.PID, ExitCode: ExitHung, Host: hosts[r], remote: true})
		}
	}
	return v
}

// exitedRanks returns the attempt's ranks for a verdict, with those that
// left while the others ran. Call it on the monitor's goroutine.
func (h *lifeWatch) exitedRanks() []probe.Rank {
	ranks := h.blankRanks()
	for i, w := range h.att.workers {
		if !w.leftAt.IsZero() {
			ranks[i].Exited, ranks[i].ExitCode, ranks[i].ExitedAt = true, 0, w.leftAt
		}
	}
	return ranks
}

// blankRanks returns the attempt's ranks, by worker, with nothing known.
func (h *lifeWatch) blankRanks() []probe.Rank {
	ranks := make([]probe.Rank, len(h.att.workers))
	for i, w := range h.att.workers {
		ranks[i] = probe.Rank{Rank: w.spec.Rank}
	}
	return ranks
}
