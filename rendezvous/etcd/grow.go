package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// How the job's store grows (package jobstore's growserver.go has the
// store's side). The agent hosting the store's first member (the grower)
// adds members, one at a time, once a round of three nodes or more has
// closed, until three vote. Each step is a sealed key under grow/:
//
//	invite/<node>  the grower asks a node to host member <name> (on the
//	               grower's lease);
//	offer/<node>   the node answers with the client and peer addresses
//	               it will serve at, or why it cannot (on its lease);
//	admit/<node>   the grower added it as a learner: the store's members,
//	               for the member's start (on the grower's lease);
//	members        the voting members' client addresses, once the new
//	               one is promoted: every node then uses them all.
//
// A node that does not answer within growAnswerTimeout, or whose member
// does not catch up within the store's connect_timeout, is removed and
// the next node is asked.
const growAnswerTimeout = 10 * time.Second

// growVoters is how many voting members the store grows to: it then
// outlives any one of them.
const growVoters = 3

// growCandidates bounds the nodes read to choose members from: the
// first to arrive (a job of thousands of nodes needs two).
const growCandidates = 64

func (k keys) growPrefix() string          { return k.root + "grow/" }
func (k keys) growInvite(id string) string { return k.growPrefix() + "invite/" + id }
func (k keys) growOffer(id string) string  { return k.growPrefix() + "offer/" + id }
func (k keys) growAdmit(id string) string  { return k.growPrefix() + "admit/" + id }
func (k keys) growMembers() string         { return k.growPrefix() + "members" }

// growInvite asks a node to host a member.
type growInvite struct {
	Name string `json:"name"`
}

// growOffer is a node's answer: where its member will serve, or why it
// cannot (Err).
type growOffer struct {
	Client string `json:"client,omitempty"`
	Peer   string `json:"peer,omitempty"`
	Err    string `json:"err,omitempty"`
}

// growAdmit is the store's members as etcd's initial cluster, for the
// new member's start.
type growAdmit struct {
	Cluster string `json:"cluster"`
}

// growMembers lists the voting members' client addresses.
type growMembers struct {
	Clients []string `json:"clients"`
}

// putSealed puts v, a record of the store's growth sealed with the
// job's secret, at key; on this node's lease when leased.
func (r *Rendezvous) putSealed(ctx context.Context, key string, v any, leased bool) error {
	var opts []clientv3.OpOption
	if leased {
		opts = append(opts, clientv3.WithLease(r.lease.Load().id))
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := r.cli.Put(cctx, key, r.seal(key, kindGrow, v), opts...)
	return err
}

// openSealed reads kv's record of the store's growth into v; false if it
// is not the job's.
func (r *Rendezvous) openSealed(kv *mvccpb.KeyValue, v any) bool {
	return r.read(string(kv.Key), kv.Value, kv.ModRevision, kindGrow, v)
}

// storeGrower is the grower: the agent that hosts a growable store's
// first member. run ends with its context; it adds members after each
// round that Grow reports.
type storeGrower struct {
	r      *Rendezvous
	server *jobstore.Server
	// timeout bounds a new member's catch-up (connect_timeout).
	timeout time.Duration
	rounds  chan int
	// clients are the voting members' client addresses, this node's (the
	// endpoint) first: each new member's as it offered it, since etcd
	// lists a member's client address only once the member published it,
	// which may come after its promotion.
	clients []string
	// next numbers the next member's name; tried are the nodes that
	// could not host one.
	next  int
	tried map[string]bool
}

func newStoreGrower(r *Rendezvous, server *jobstore.Server, endpoint string, timeout time.Duration) *storeGrower {
	return &storeGrower{r: r, server: server, timeout: timeout, rounds: make(chan int, 1), clients: []string{endpoint}, next: 1, tried: map[string]bool{}}
}

// roundClosed tells the grower that round n closed with size nodes.
func (g *storeGrower) roundClosed(n, size int) {
	if size < growVoters {
		return
	}
	select {
	case g.rounds <- n:
	default: // it will read the latest round's members anyway
	}
}

// run grows the store after the rounds it is told of, until it has
// growVoters voting members or ctx ends.
func (g *storeGrower) run(ctx context.Context) {
	log := g.r.cfg.Log
	for len(g.clients) < growVoters {
		var round int
		select {
		case <-ctx.Done():
			return
		case round = <-g.rounds:
		}
		for _, node := range g.candidates(ctx, round) {
			if len(g.clients) >= growVoters || ctx.Err() != nil {
				break
			}
			if err := g.add(ctx, node); err != nil {
				if ctx.Err() != nil {
					return
				}
				g.tried[node.ID] = true
				log.Warnf("the job's store did not grow by a member on node %s (%s): %v; asking another node", node.ID, node.Addr, err)
			}
		}
	}
	log.Infof("the job's store has %d voting members (it outlives any one of them, this node's included)", len(g.clients))
	g.presentElsewhere(ctx)
}

// presentElsewhere holds this node's presence (presence.go) at the other
// members too, until ctx ends: its own member dies with it, and the
// others end its lease within the presence grace instead of a TTL later.
func (g *storeGrower) presentElsewhere(ctx context.Context) {
	r := g.r
	if r.presenceTLS == nil {
		return
	}
	others := g.clients[1:]
	holdPresence(ctx, func() []string { return others }, r.presenceTLS, r.lease.Load().id, r.cfg.Log)
}

// candidates lists round's other nodes that may host a member, first
// those on hosts without one.
func (g *storeGrower) candidates(ctx context.Context, round int) []NodeRecord {
	r := g.r
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	prefix := r.k.joinPrefix(round)
	resp, err := r.cli.Get(cctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(growCandidates))
	if err != nil {
		r.cfg.Log.Warnf("the job's store cannot grow after round %d: its nodes: %v", round, err)
		return nil
	}
	ownHost, _, _ := net.SplitHostPort(g.server.Endpoints()[0])
	var apart, beside []NodeRecord
	for _, kv := range resp.Kvs {
		var n NodeRecord
		id := strings.TrimPrefix(string(kv.Key), prefix)
		if id == r.id || g.tried[id] || !r.read(string(kv.Key), kv.Value, kv.ModRevision, kindJoin, &n) || n.ID != id {
			continue
		}
		if n.Addr == ownHost || n.Addr == r.cfg.Addr {
			beside = append(beside, n)
		} else {
			apart = append(apart, n)
		}
	}
	return append(apart, beside...)
}

// add makes node host the next member: invited, added as a learner at
// the address it offers, started there, and promoted once caught up.
func (g *storeGrower) add(ctx context.Context, node NodeRecord) error {
	r := g.r
	name := jobstore.MemberName(g.next)
	g.next++
	defer g.clear(node.ID)
	if err := r.putSealed(ctx, r.k.growInvite(node.ID), growInvite{Name: name}, true); err != nil {
		return fmt.Errorf("invite: %w", err)
	}
	var offer growOffer
	actx, cancel := context.WithTimeout(ctx, growAnswerTimeout)
	rev, err := g.await(actx, r.k.growOffer(node.ID), 0, &offer)
	cancel()
	switch {
	case err != nil:
		return fmt.Errorf("no answer within %v: %w", growAnswerTimeout, err)
	case offer.Err != "":
		return errors.New(offer.Err)
	}
	id, initial, err := g.server.AddLearner(ctx, name, offer.Peer)
	if err != nil {
		return err
	}
	if err := r.putSealed(ctx, r.k.growAdmit(node.ID), growAdmit{Cluster: initial}, true); err != nil {
		g.remove(ctx, id)
		return fmt.Errorf("admit: %w", err)
	}
	// Promoted once caught up, unless the node says its member failed.
	pctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	failed := make(chan error, 1)
	go func() {
		var o growOffer
		if _, err := g.await(pctx, r.k.growOffer(node.ID), rev, &o); err == nil && o.Err != "" {
			failed <- errors.New(o.Err)
			cancel()
		}
	}()
	if err := g.server.Promote(pctx, id); err != nil {
		g.remove(ctx, id)
		select {
		case ferr := <-failed:
			return ferr
		default:
			return err
		}
	}
	g.clients = append(g.clients, offer.Client)
	if err := r.putSealed(ctx, r.k.growMembers(), growMembers{Clients: g.clients}, false); err != nil {
		return fmt.Errorf("member %s voting, but telling the nodes: %w", name, err)
	}
	r.cfg.Log.Infof("the job's store grew by member %s on node %s at %s: %d voting members (%s)", name, node.ID, offer.Client, len(g.clients), strings.Join(g.clients, ","))
	return nil
}

// remove takes back a learner that did not catch up.
func (g *storeGrower) remove(ctx context.Context, id uint64) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := g.server.RemoveMember(cctx, id); err != nil {
		g.r.cfg.Log.Warnf("the job's store: remove learner %x: %v", id, err)
	}
}

// clear deletes the invitation's keys.
func (g *storeGrower) clear(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	for _, key := range []string{g.r.k.growInvite(id), g.r.k.growAdmit(id)} {
		_, _ = g.r.cli.Delete(ctx, key)
	}
}

// await waits for a sealed value at key changed after revision after,
// read into v; it returns the value's revision.
func (g *storeGrower) await(ctx context.Context, key string, after int64, v any) (int64, error) {
	r := g.r
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := r.cli.Get(cctx, key)
		cancel()
		if err != nil {
			return 0, err
		}
		if len(resp.Kvs) == 1 && resp.Kvs[0].ModRevision > after && r.openSealed(resp.Kvs[0], v) {
			return resp.Kvs[0].ModRevision, nil
		}
		wctx, wcancel := context.WithCancel(ctx)
		w := r.cli.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-w:
		case <-ctx.Done():
		}
		wcancel()
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
}
