package etcd

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// Defaults of Config, torchrun's where torchrun has the setting.
const (
	// DefaultPrefix is the key prefix of all jobs: the one the job's
	// store lets the job's user read and write.
	DefaultPrefix          = jobstore.DefaultPrefix
	DefaultLastCallTimeout = 30 * time.Second
	DefaultJoinTimeout     = 600 * time.Second
	// DefaultLeaseTTL: a lost node is dropped within about 4.1 s, so a
	// job trains again within 5 s of a node loss (plus its workers'
	// start-up); keeping 4,096 nodes' leases alive at it costs the store
	// about a tenth of a core (`gorun bench leases`, docs/benchmarks.md).
	// A node stalled for more than about 2.7 s (a third of it is between
	// two renewals) is dropped too.
	DefaultLeaseTTL         = 4 * time.Second
	DefaultWaitNoteInterval = 5 * time.Second
	// DefaultUnreachableTimeout is Config.UnreachableTimeout's default.
	DefaultUnreachableTimeout = 60 * time.Second
	// callTimeout bounds one call that must not wait for etcd forever
	// (etcd's client waits for a connection otherwise). The lease grant
	// waits up to UnreachableTimeout instead (openLease).
	callTimeout = 5 * time.Second
	// revokeTimeout bounds Close's revoke of the lease.
	revokeTimeout = 2 * time.Second
)

// Errors of the etcd rendezvous of its own; the others are package
// rendezvous's sentinels (rendezvous.ErrJobFailed, ...).
var (
	// ErrUnreachable: etcd stayed unreachable for longer than
	// Config.UnreachableTimeout.
	ErrUnreachable = errors.New("rendezvous: etcd unreachable")
)

// Config configures one agent's etcd rendezvous.
type Config struct {
	// Shape is what all nodes must agree on.
	Shape Shape
	// NodeRank is --node-rank, or -1 to be assigned one.
	NodeRank int
	// Addr is this node's address (MASTER_ADDR when it is node 0).
	Addr string
	// Prefix is the key prefix of all jobs (default /gorun).
	Prefix string
	// LastCallTimeout is how long a round stays open for more nodes once
	// MinNodes have joined (torchrun's last_call_timeout).
	LastCallTimeout time.Duration
	// JoinTimeout bounds a wait for a round to close (join_timeout).
	JoinTimeout time.Duration
	// LeaseTTL is the life of a node's keys without keep-alive: a lost
	// node is detected within it.
	LeaseTTL time.Duration
	// WaitNoteInterval spaces the "waiting for nodes" messages.
	WaitNoteInterval time.Duration
	// Log receives progress and warnings.
	Log logrus.FieldLogger
	// UnreachableTimeout bounds how long etcd may stay unreachable, at
	// the start or between rounds, before Next gives up with
	// ErrUnreachable (DefaultUnreachableTimeout); a round merely waiting
	// for nodes waits up to JoinTimeout.
	UnreachableTimeout time.Duration
	// Presence says the store is a job's store reached over the job's
	// TLS (its client port is gorun's): this node then holds a presence
	// connection, so that the store ends its lease as soon as the node's
	// process is gone, not a TTL later (presence.go).
	Presence bool
	// SoleStoreHost is the store's only member when another agent of the
	// job hosts it (the embedded store of a c10d line), "" otherwise:
	// watched, so that its loss ends the rendezvous's waits at once
	// (watchStoreHost).
	SoleStoreHost string
	// Token is the job's secret, the same on every node: the values the
	// job writes are sealed with a key derived from it, and a value that
	// is not is refused. Nil: the first node makes one and keeps it in
	// etcd (ctl/token), which protects the job only as far as etcd's own
	// access control does.
	Token Token
	// ShowSetting names a setting as the users of the other nodes know
	// it, in what this node tells them through the store
	// (rendezvous.Spec's); nil: the setting's own name.
	ShowSetting func(setting.Name) string
}

// Rendezvous is one agent's membership in a job over etcd.
type Rendezvous struct {
	cli *clientv3.Client
	cfg Config
	// node is this node as Next last described it: its workers and role.
	node rendezvous.Node
	k    keys
	id   string
	// presenceTLS is the job's TLS for the lease's presence connection;
	// nil without Config.Presence.
	presenceTLS *tls.Config
	// lease is the node's current lease: a new one replaces it when it
	// was lost (etcd unreachable for longer than its TTL) and the node
	// joins again.
	lease atomic.Pointer[keptLease]
	// life ends with Close (stop), and with it the lease's keep-alive
	// and a kept control watch.
	life context.Context
	// kept is the last successful join's control watch, kept for the
	// round's Watch (keepCtlWatch).
	keptMu sync.Mutex
	kept   *keptWatch
	stop   context.CancelFunc
	// storeAlive ends when the store is gone for good (storeGone, with
	// goneWhy's reason): see watchStoreHost.
	storeAlive context.Context
	storeGone  context.CancelFunc
	goneWhy    atomic.Pointer[error]
	// grown is set once the store has growVoters voting members
	// (grow.go): its first host's loss is then no longer its end.
	grown atomic.Bool
	// prevRank is the group rank of the last round this node ran, and
	// lastRound that round's number (-1 before the first).
	prevRank  int
	lastRound int
	// lastRec is that round's record.
	lastRec RoundRecord
	// joining is the round of the last join attempt (-1 before the first).
	joining int
	// spareSince is when this node began to wait as a hot spare in the
	// current Next (zero when it has not).
	spareSince time.Time
	// shape is cfg.Shape as recorded in etcd; sealedShape its record,
	// sealed (sealShape).
	shape, sealedShape string
	// token is the job's secret (cfg.Token, or the one kept in etcd); g
	// seals and opens values with it.
	token Token
	g     *jobauth.Guard
	// trusted is set once this node has read the job's shape sealed with
	// its own token: only then does it mend refused values (a node given
	// the wrong token must not "mend" the job's own).
	trusted atomic.Bool
	// member is set once this node ran a round of the job: its shape is
	// the job's (it matched to join), which it puts back if deleted.
	member atomic.Bool
}

// New checks cfg and opens this node's lease (kept alive until Close).
// The job's shape is recorded or checked when the node first joins.
func New(ctx context.Context, cli *clientv3.Client, cfg Config) (*Rendezvous, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.LastCallTimeout == 0 {
		cfg.LastCallTimeout = DefaultLastCallTimeout
	}
	if cfg.JoinTimeout == 0 {
		cfg.JoinTimeout = DefaultJoinTimeout
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.WaitNoteInterval == 0 {
		cfg.WaitNoteInterval = DefaultWaitNoteInterval
	}
	if cfg.UnreachableTimeout == 0 {
		cfg.UnreachableTimeout = DefaultUnreachableTimeout
	}
	if cfg.Log == nil {
		cfg.Log = logrus.StandardLogger()
	}
	sh := cfg.Shape
	switch {
	case rendezvous.ValidateRunID(sh.RunID) != nil:
		return nil, fmt.Errorf("%w: %w", rendezvous.ErrInvalidConfig, rendezvous.ValidateRunID(sh.RunID))
	case sh.MinNodes < 1 || sh.MaxNodes < sh.MinNodes:
		return nil, setting.Errorf("%w: %s=%d:%d: want 0 < MIN <= MAX", rendezvous.ErrInvalidConfig, setting.Name("NNodes"), sh.MinNodes, sh.MaxNodes)
	case cfg.NodeRank >= sh.MaxNodes:
		return nil, setting.Errorf("%w: %s=%d: want below the maximum number of nodes, %d", rendezvous.ErrInvalidConfig, setting.Name("NodeRank"), cfg.NodeRank, sh.MaxNodes)
	case sh.Sizes != nil && sh.smallest() == 0:
		return nil, setting.Errorf("%w: %s=%d:%d: no node count in that range gives a valid %s layout (allowed: %v)", rendezvous.ErrInvalidConfig, setting.Name("NNodes"), sh.MinNodes, sh.MaxNodes, setting.Name("Plan"), sh.Sizes)
	case cfg.LeaseTTL < time.Second:
		return nil, setting.Errorf("%w: %s=%v: want at least 1s", rendezvous.ErrInvalidConfig, setting.Name("Conf.lease_ttl"), cfg.LeaseTTL)
	}
	life, stop := context.WithCancel(context.Background())
	host, _ := os.Hostname()
	r := &Rendezvous{
		cli: cli, cfg: cfg, k: newKeys(cfg.Prefix, sh.RunID),
		// 64 random bits: host names and pids repeat (containers run the
		// agent as pid 1), and many agents may share a process in tests.
		id:   fmt.Sprintf("%s-%d-%016x", strings.ReplaceAll(host, "/", "_"), os.Getpid(), rand.Uint64()),
		life: life, stop: stop, prevRank: -1, lastRound: -1, joining: -1,
	}
	r.storeAlive, r.storeGone = context.WithCancel(context.Background())
	shape, err := marshal(sh)
	if err != nil {
		stop()
		return nil, err
	}
	r.shape = shape
	if r.token = cfg.Token; r.token == nil {
		if r.token, err = r.storedToken(ctx); err != nil {
			stop()
			return nil, err
		}
	}
	r.g = jobauth.NewGuard(r.token, cfg.Log)
	r.sealedShape = r.sealShape()
	if cfg.Presence {
		if r.presenceTLS, err = presenceTLS(r.token); err != nil {
			stop()
			return nil, err
		}
	}
	if err := r.openLease(ctx); err != nil {
		stop()
		return nil, err
	}
	if cfg.SoleStoreHost != "" {
		go r.watchStoreHost(cfg.SoleStoreHost) // ends with r.life (Close)
	}
	return r, nil
}

// openLease grants a lease under ctx, so that an unreachable etcd ends
// the call (within UnreachableTimeout; one refused as overloaded is asked
// again: RetryOverload), and keeps it alive until Close.
func (r *Rendezvous) openLease(ctx context.Context) error {
	ttl := int64((r.cfg.LeaseTTL + time.Second - 1) / time.Second)
	// One request at a time, waiting as long as the store may take to
	// answer: a request given up and sent again would be proposed twice
	// to a store already behind (at 16,384 agents here, grants given up
	// after 5 s and sent again never caught up).
	gctx, cancel := context.WithTimeout(ctx, r.cfg.UnreachableTimeout)
	defer cancel()
	var grant *clientv3.LeaseGrantResponse
	err := RetryOverload(gctx, r.cfg.UnreachableTimeout, func() (err error) {
		grant, err = r.cli.Grant(gctx, ttl)
		return err
	})
	if err != nil {
		return fmt.Errorf("rendezvous: open a lease on %v: %w", r.cli.Endpoints(), err)
	}
	l := keepLease(r.life, r.cli, grant.ID, time.Duration(ttl)*time.Second)
	if r.presenceTLS != nil {
		l.present(r.cli.Endpoints, r.presenceTLS, r.cfg.Log)
	}
	r.lease.Store(l)
	return nil
}

// storedToken reads the job's token from etcd, or makes it if this node
// is the first: for jobs given no token.
func (r *Rendezvous) storedToken(ctx context.Context) (Token, error) {
	mine, err := rendezvous.NewToken()
	if err != nil {
		return nil, err
	}
	key := r.k.token()
	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, encodeRecord(kindToken, mine.Reveal()))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, fmt.Errorf("rendezvous: %w: %w", errEtcd, err)
	}
	if resp.Succeeded {
		r.cfg.Log.Infof("rendezvous %s: no job token given; the job's secret is kept in etcd at %s, so the job is only as safe as etcd's access control (give every node --rdzv-conf token_file=PATH or GORUN_RDZV_TOKEN)", r.cfg.Shape.RunID, key)
		return mine, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil, fmt.Errorf("rendezvous: %s vanished while read", key)
	}
	return parseStoredToken(key, kvs[0].Value)
}

// JobSecret is the secret this job's workers share (GORUN_JOB_SECRET).
func (r *Rendezvous) JobSecret() rendezvous.Token { return r.token.JobSecret(r.cfg.Shape.RunID) }

// ID is this agent's node id in the job.
func (r *Rendezvous) ID() string { return r.id }

// checkShape compares the job's shape in c, the control keys just read,
// or records it if this node is the first; the first also creates the
// round and restart counters. c is brought up to date either way.
func (r *Rendezvous) checkShape(ctx context.Context, c *control) error {
	if c.shape != nil {
		return r.compareShape(c.shape)
	}
	if err := c.foreignErr(); err != nil {
		return err
	}
	if _, forged := c.forged[r.k.shape()]; forged {
		return r.untrustedShape()
	}
	if c.jobExists() {
		return r.missingShape() // a member put it back as it read (applyKVs)
	}
	resp, err := r.cli.Txn(ctx).
		If(r.noJob(c)...).
		Then(r.putShape(), r.putRound(0), r.putRestarts(0)).
		Else(clientv3.OpGet(r.k.ctl(), clientv3.WithPrefix())).Commit()
	if err != nil {
		return etcdFailure(err)
	}
	if resp.Succeeded {
		c.shape, c.round, c.restarts = []byte(r.shape), 0, 0
		return nil
	}
	// Another node came first: its shape, and the control keys as they
	// are now.
	r.applyKVs(ctx, c, resp.Responses[0].GetResponseRange().Kvs)
	if err := c.foreignErr(); err != nil {
		return err
	}
	switch _, forged := c.forged[r.k.shape()]; {
	case c.shape != nil:
		return r.compareShape(c.shape)
	case c.jobExists():
		return r.missingShape()
	case forged:
		return r.untrustedShape()
	}
	// No shape, and no round of this job's: what stopped the creation is
	// a stranger's record of a round (refused above).
	return setting.Errorf("%w %s: the job cannot be made at %s: keys that this job did not seal are there (refused above); start the job under a new %s", rendezvous.ErrShapeMismatch, r.cfg.Shape.RunID, r.k.ctl(), setting.Name("RunID"))
}

// putShapeBack puts back the shape of a job whose rounds are there but
// whose shape is gone (deleted by someone who can write to the store),
// if this node ran one of its rounds: its own shape matched the job's
// to join. Any other node cannot tell whether it joins the same job, and
// is refused (missingShape).
func (r *Rendezvous) putShapeBack(ctx context.Context, c *control) {
	if !r.member.Load() {
		return
	}
	resp, err := r.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(r.k.shape()), "=", 0)).Then(r.putShape()).Commit()
	if err != nil {
		return // the next read tries again
	}
	if resp.Succeeded {
		r.cfg.Log.Warnf("rendezvous: put back the job's shape at %s (it was deleted)", r.k.shape())
	}
	c.shape, c.jobShape = []byte(r.shape), &r.cfg.Shape
}

// noJob guards the creation of the job: neither its shape nor its round
// counter is there (or the counter is a stranger's that c refused, and
// the creation replaces), nor any round's record or end. A job whose shape alone is gone (deleted by
// someone who can write to the store) is not made again: that would
// reset its counters, and a node of another shape would then judge the
// job's records by its own. c is nil before any read.
func (r *Rendezvous) noJob(c *control) []clientv3.Cmp {
	round := clientv3.Compare(clientv3.CreateRevision(r.k.round()), "=", 0)
	if c != nil {
		if rev, forged := c.forged[r.k.round()]; forged {
			round = clientv3.Compare(clientv3.ModRevision(r.k.round()), "=", rev)
		}
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(r.k.shape()), "=", 0), round,
		// No round's record or end (a compare over an empty range holds).
		clientv3.Compare(clientv3.CreateRevision(r.k.closedPrefix()), "=", 0).WithPrefix(),
		clientv3.Compare(clientv3.CreateRevision(r.k.endPrefix()), "=", 0).WithPrefix()}
}

// missingShape refuses a node whose job has rounds but no shape.
func (r *Rendezvous) missingShape() error {
	return setting.Errorf("%w %s: the job's shape at %s is gone while its rounds are there (someone who can write to the store deleted it): this node cannot check that it joins the same job, and does not make it again; start the job under a new %s", rendezvous.ErrShapeMismatch, r.cfg.Shape.RunID, r.k.shape(), setting.Name("RunID"))
}

// compareShape refuses this node if the job's recorded shape differs.
func (r *Rendezvous) compareShape(recorded []byte) error {
	var job Shape
	if err := json.Unmarshal(recorded, &job); err != nil {
		return fmt.Errorf("rendezvous: %s holds no job shape: %w", r.k.shape(), err)
	}
	if d := r.cfg.Shape.Diff(job); d != nil {
		return fmt.Errorf("%w %s: %w", rendezvous.ErrShapeMismatch, r.cfg.Shape.RunID, d)
	}
	return nil
}

// untrustedShape explains a job shape sealed with another secret.
func (r *Rendezvous) untrustedShape() error {
	return setting.Errorf("%w %s: the job's shape at %s is not sealed with this node's job token: every node needs the same token (%s=, GORUN_RDZV_TOKEN), and %s must be this job's alone", rendezvous.ErrShapeMismatch, r.cfg.Shape.RunID, r.k.shape(), setting.Name("Conf.token_file"), setting.Name("RunID"))
}

// Close leaves the job: the lease is revoked, so this node's keys go at
// once. It is safe to call more than once.
func (r *Rendezvous) Close(ctx context.Context) error {
	// Revoke, but not for long: an unreachable etcd lets the lease expire
	// by itself.
	r.stop()
	lease := r.lease.Load()
	lease.ended()
	if r.goneErr() != nil {
		return nil // the store, and the lease with it, is gone
	}
	rctx, cancel := context.WithTimeout(ctx, revokeTimeout)
	_, err := r.cli.Revoke(rctx, lease.id)
	cancel()
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("rendezvous: revoke lease: %w", err)
	}
	return nil
}

// Next joins the next round and blocks until it closes with this node as
// a member. It returns rendezvous.ErrJobFailed or
// rendezvous.ErrJobSucceeded when the job is over,
// rendezvous.ErrJoinTimeout when too few nodes came in time.
func (r *Rendezvous) Next(ctx context.Context, node rendezvous.Node) (rendezvous.Round, error) {
	if err := node.Validate(); err != nil {
		return rendezvous.Round{}, err
	}
	if err := r.goneErr(); err != nil {
		return rendezvous.Round{}, err
	}
	ctx, stop := r.whileStore(ctx)
	defer stop()
	r.node = node
	port := node.MasterPort // held by the agent
	if port == 0 {
		var err error
		if port, err = rendezvous.FreePort(r.cfg.Addr); err != nil {
			return rendezvous.Round{}, err
		}
	}
	r.spareSince = time.Time{}
	me := NodeRecord{ID: r.id, Addr: r.cfg.Addr, MasterPort: port, Nproc: node.LocalWorldSize, Role: node.Role, NodeRank: r.cfg.NodeRank, PrevRank: r.prevRank, PrevRound: r.lastRound}
	jctx, cancel := context.WithTimeout(ctx, r.cfg.JoinTimeout)
	defer cancel()
	delay := 50 * time.Millisecond
	var lastErr error
	// unreachable is when etcd's first failure of the current run of
	// failures came; lastWarn when the last warning was printed.
	var unreachable, lastWarn time.Time
	for {
		res, err := r.joinLeased(jctx, me)
		switch {
		case err == nil:
			return r.roundFor(res), nil
		case errors.Is(err, errRetry):
			unreachable = time.Time{}
			continue
		case jctx.Err() != nil && ctx.Err() == nil:
			// The join's own deadline: a single call's (a lease grant
			// bounded by callTimeout) is an unreachable etcd, below.
			if errors.Is(err, errEtcd) {
				lastErr = err
			}
			if lastErr != nil {
				return rendezvous.Round{}, fmt.Errorf("%w after %v: etcd at %s: %v", rendezvous.ErrJoinTimeout, r.cfg.JoinTimeout, strings.Join(r.cli.Endpoints(), ","), lastErr)
			}
			return rendezvous.Round{}, fmt.Errorf("%w after %v: too few nodes joined (min %d%s)%s", rendezvous.ErrJoinTimeout, r.cfg.JoinTimeout, r.cfg.Shape.smallest(), r.cfg.Shape.sizesNote(), r.joinedNodes(ctx))
		case ctx.Err() != nil, errors.Is(err, rendezvous.ErrJobFailed), errors.Is(err, rendezvous.ErrJobSucceeded), errors.Is(err, rendezvous.ErrPreempted), errors.Is(err, rendezvous.ErrShapeMismatch), errors.Is(err, rendezvous.ErrInvalidNode):
			return rendezvous.Round{}, err
		}
		lastErr = err
		if gone := r.goneErr(); gone != nil {
			return rendezvous.Round{}, gone
		}
		now := time.Now()
		if unreachable.IsZero() {
			unreachable = now
		}
		if gone := now.Sub(unreachable); gone >= r.cfg.UnreachableTimeout {
			return rendezvous.Round{}, setting.Errorf("%w: etcd at %s did not answer for %v (%s): %v", ErrUnreachable, strings.Join(r.cli.Endpoints(), ","), gone.Round(time.Second), setting.Name("Conf.connect_timeout"), err)
		}
		if now.Sub(lastWarn) >= r.cfg.WaitNoteInterval {
			r.cfg.Log.Warnf("rendezvous: etcd at %s: %v; retrying for up to %v more", strings.Join(r.cli.Endpoints(), ","), err, (r.cfg.UnreachableTimeout - now.Sub(unreachable)).Round(time.Second))
			lastWarn = now
		}
		if err := ctxtime.Sleep(jctx, delay); err != nil {
			return rendezvous.Round{}, fmt.Errorf("%w after %v: etcd at %s: %v", rendezvous.ErrJoinTimeout, r.cfg.JoinTimeout, strings.Join(r.cli.Endpoints(), ","), lastErr)
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// joinedNodes names the nodes in the round this node last tried to join,
// for a join timeout's message ("" if etcd cannot say).
func (r *Rendezvous) joinedNodes(ctx context.Context) string {
	if r.joining < 0 {
		return ""
	}
	rctx, cancel := context.WithTimeout(ctx, revokeTimeout)
	defer cancel()
	prefix := r.k.joinPrefix(r.joining)
	resp, err := r.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return ""
	}
	ids := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		ids = append(ids, strings.TrimPrefix(string(kv.Key), prefix))
	}
	const shown = 16
	more := ""
	if len(ids) > shown {
		ids, more = ids[:shown], fmt.Sprintf(" and %d more", len(ids)-shown)
	}
	return fmt.Sprintf("; %d in round %d: %s%s", len(resp.Kvs), r.joining, strings.Join(ids, ", "), more)
}

// joinLeased runs one join attempt under this node's lease: a lost lease
// (etcd unreachable for longer than its TTL, so this node's keys are
// gone) ends the attempt, and the next one first opens a new lease, so a
// node cut off for a while joins again once etcd is back.
func (r *Rendezvous) joinLeased(ctx context.Context, me NodeRecord) (joined, error) {
	if r.lease.Load().lost() {
		if err := r.openLease(ctx); err != nil {
			return joined{}, etcdFailure(err)
		}
		r.cfg.Log.Warnf("rendezvous %s: this node's lease had ended (etcd unreachable for longer than %v); joining again with a new one", r.cfg.Shape.RunID, r.cfg.LeaseTTL)
	}
	lctx, cancel, lease := r.whileLeased(ctx)
	defer cancel()
	res, err := r.join(lctx, me)
	if err != nil && lease.lost() && ctx.Err() == nil {
		err = fmt.Errorf("%w: this node's lease ended while joining", errEtcd)
	}
	return res, err
}

// AgentStorePort is the port the agent's store binds: 0, a free one
// (the round's master port is the master node's).
func (r *Rendezvous) AgentStorePort() int { return 0 }

// roundFor turns a closed round into this node's view of it.
func (r *Rendezvous) roundFor(res joined) rendezvous.Round {
	rec := res.rec
	r.prevRank, r.lastRound, r.lastRec = res.group, rec.Round, rec
	r.member.Store(true)
	if r.cfg.NodeRank >= 0 && res.group != r.cfg.NodeRank {
		r.cfg.Log.Warnf("rendezvous %s: round %d has %d nodes: this node (--node-rank=%d) runs as group rank %d", r.cfg.Shape.RunID, rec.Round, rec.Size, r.cfg.NodeRank, res.group)
	}
	return rendezvous.Round{
		RunID: r.cfg.Shape.RunID, Number: rec.Round, RestartCount: rec.Restarts,
		GroupRank: res.group, GroupWorldSize: rec.Size, BaseRank: res.base, WorldSize: rec.WorldSize,
		BaseRoleRank: res.roleBase, RoleWorldSize: res.roleWorld,
		MasterAddr: rec.MasterAddr, MasterPort: rec.MasterPort, UseAgentStore: false,
		StoreEndpoints: r.cli.Endpoints(), StorePrefix: r.k.store(rec.Round),
		JobSecret: r.JobSecret(), SpareSince: r.spareSince,
	}
}

// outcomeReadFor bounds the linearizable read of the job's outcome when
// a node leaves; a store without a majority is then read serializably.
const outcomeReadFor = time.Second

// hasOutcome says whether the job has an outcome: read linearizably
// within outcomeReadFor, else from a member's own data.
func (r *Rendezvous) hasOutcome(ctx context.Context) bool {
	lctx, cancel := context.WithTimeout(ctx, outcomeReadFor)
	resp, err := r.cli.Get(lctx, r.k.outcome())
	cancel()
	if err != nil && ctx.Err() == nil {
		resp, err = r.cli.Get(ctx, r.k.outcome(), clientv3.WithSerializable())
	}
	return err == nil && len(resp.Kvs) > 0
}

// WaitForOthersToLeave waits, when the job has finished, until no node is
// left in the last round this node ran, or ctx ends. The node that hosts
// the embedded store calls it after Close, so that the others can read the
// job's outcome before the store goes away.
func (r *Rendezvous) WaitForOthersToLeave(ctx context.Context) {
	if r.lastRound < 0 {
		return
	}
	// Only a finished job has an outcome for the others to read; a node
	// stopped by a signal leaves at once. At a job's end the members stop
	// one after another, and a store left without a majority (a grown one
	// whose first host was lost, then a second member that left) cannot
	// answer a linearizable read: that read waited for the whole
	// leaveTimeout. So the outcome is read linearizably for a moment (a
	// member's own data may not hold an outcome just written: the node
	// would leave, and take the majority the last node's report needs),
	// then from this node's member; the nodes still in the round, from
	// any member's data (a key that is gone there is gone).
	if !r.hasOutcome(ctx) {
		return
	}
	prefix := r.k.joinPrefix(r.lastRound)
	w := r.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix())
	for {
		resp, err := r.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
		if err != nil || resp.Count == 0 {
			return
		}
		select {
		case _, ok := <-w:
			if !ok {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// errRetry asks Next to start its join over (the round moved on);
// etcdFailure marks err, a failed call to etcd, with errEtcd. A lease
// that etcd no longer knows is not an unreachable etcd, and says so.
func etcdFailure(err error) error {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return &leaseGone{err}
	}
	return fmt.Errorf("%w: %w", errEtcd, err)
}

// leaseGone is an etcd failure: this node's lease is gone from the store.
type leaseGone struct{ err error }

func (e *leaseGone) Error() string {
	return "this node's lease is gone from the store (revoked by someone with the store's password, or the store restarted without its data): " + e.err.Error()
}

func (e *leaseGone) Unwrap() []error { return []error{errEtcd, e.err} }

// errEtcd marks a failed call to etcd, as opposed to a wait for nodes.
var (
	errRetry = errors.New("rendezvous: retry")
	errEtcd  = errors.New("etcd unreachable")
)
