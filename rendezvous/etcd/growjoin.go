package etcd

import (
	"context"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// storeJoiner is a node's side of the store's growth: it hosts a member
// when the grower asks, and uses every voting member once told.
type storeJoiner struct {
	r     *Rendezvous
	c     Conf
	token Token
	// port is the endpoint's: a member serves there (and its peers at
	// the next) when those are free on this host.
	port int
	// member is the member this node hosts, if any (closed by close).
	member *jobstore.MemberProcess
	// hosting is called once this node hosts a member.
	hosting func()
	// pending is the member this node last offered to host.
	pending pendingMember
}

// run follows the growth keys until ctx ends.
func (j *storeJoiner) run(ctx context.Context) {
	r := j.r
	prefix := r.k.growPrefix()
	delay := time.Duration(0)
	var rev int64
	for ctx.Err() == nil {
		if rev == 0 {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			resp, err := r.cli.Get(cctx, prefix, clientv3.WithPrefix())
			cancel()
			if err == nil {
				for _, kv := range resp.Kvs {
					j.handle(ctx, kv)
				}
				rev = resp.Header.Revision
			}
		}
		if rev != 0 {
			wctx, cancel := context.WithCancel(ctx)
			for resp := range r.cli.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
				if resp.Err() != nil {
					break
				}
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypePut {
						j.handle(ctx, ev.Kv)
					}
					rev = ev.Kv.ModRevision
				}
			}
			cancel()
		}
		delay = min(max(2*delay, 50*time.Millisecond), 2*time.Second)
		if ctxtime.Sleep(ctx, delay) != nil {
			return
		}
	}
}

// handle acts on one growth key.
func (j *storeJoiner) handle(ctx context.Context, kv *mvccpb.KeyValue) {
	r := j.r
	switch string(kv.Key) {
	case r.k.growMembers():
		var m growMembers
		if r.openSealed(kv, &m) && len(m.Clients) > 0 {
			r.cli.SetEndpoints(m.Clients...)
			if len(m.Clients) >= growVoters {
				r.grown.Store(true)
			}
			r.cfg.Log.Debugf("the job's store has %d voting members: %s", len(m.Clients), strings.Join(m.Clients, ","))
		}
	case r.k.growInvite(r.id):
		var inv growInvite
		if r.openSealed(kv, &inv) && j.member == nil {
			j.offer(ctx, inv.Name)
		}
	case r.k.growAdmit(r.id):
		var adm growAdmit
		if r.openSealed(kv, &adm) && j.member == nil {
			j.join(ctx, adm.Cluster)
		}
	}
}

// offer answers an invitation to host member name: where it will serve.
func (j *storeJoiner) offer(ctx context.Context, name string) {
	r := j.r
	client, peer, err := jobstore.MemberPorts(ctx, r.cfg.Addr, j.port)
	o := growOffer{Client: client, Peer: peer}
	if err != nil {
		o = growOffer{Err: err.Error()}
	}
	j.pending = pendingMember{name: name, client: client, peer: peer}
	if err := r.putSealed(ctx, r.k.growOffer(r.id), o, true); err != nil {
		r.cfg.Log.Warnf("the job's store asked this node to host member %s; the answer: %v", name, err)
	}
}

// pendingMember is the member this node offered to host.
type pendingMember struct{ name, client, peer string }

// join starts the member this node was admitted as, with the store's
// members initial; a failure is this node's offer's Err, for the grower.
func (j *storeJoiner) join(ctx context.Context, initial string) {
	r, p := j.r, j.pending
	if p.name == "" {
		return // admitted without an offer of this agent's
	}
	m, err := jobstore.JoinMember(ctx, j.c.hostConfig(), j.token, p.name, p.client, p.peer, initial, r.cfg.Log)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		r.cfg.Log.Warnf("the job's store asked this node to host member %s: %v", p.name, err)
		if perr := r.putSealed(ctx, r.k.growOffer(r.id), growOffer{Err: err.Error()}, true); perr != nil {
			r.cfg.Log.Warnf("telling the job's store: %v", perr)
		}
		return
	}
	j.member = m
	j.hosting()
}

// close stops the member this node hosts, if any.
func (j *storeJoiner) close() {
	if j.member != nil {
		j.member.Close()
	}
}
