package jobstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/rendezvous"
)

// A store that grows: the embedded store of a plain c10d line starts as
// one member, at the endpoint, in the agent that hosts it. When three
// nodes or more take part, that agent adds two of the other nodes as
// members (package etcd's grow.go), one at a time: each joins as a
// learner (which does not count towards the majority), catches up, and is
// promoted to a voting member. Once three members vote, the store, and the job, outlive
// any one of them, its first host included. The membership calls need
// etcd's root, whose password only the growable store keeps (in memory).

// growableConfig completes ec for a growable store's first member, or
// for a member that joins a running store: named, its peers over the
// job's mutual TLS, signed auth tokens (good at every member), and the
// job's cluster token.
func growableConfig(ec *embed.Config, cfg ServerConfig) {
	ec.Name = cfg.Name
	ec.ListenPeerUrls = []url.URL{{Scheme: "https", Host: cfg.peerListen}}
	ec.AdvertisePeerUrls = []url.URL{{Scheme: "https", Host: cfg.PeerAddr}}
	ec.InitialClusterToken = clusterToken(cfg.Token)
	ec.PeerTLSInfo = cfg.peerTLS
	if cfg.authToken != "" { // etcd's default, simple tokens, otherwise
		ec.AuthToken = cfg.authToken
	}
	// etcd refuses to add a member unless every voting member has been
	// connected for 5 s: that protects a majority when a voter is added,
	// but members come as learners here, which count towards none, and
	// the second would wait 5 s after the first's promotion.
	ec.StrictReconfigCheck = false
	if cfg.Join != "" {
		ec.InitialCluster, ec.ClusterState = cfg.Join, embed.ClusterStateFlagExisting
		return
	}
	ec.InitialCluster, ec.ClusterState = cfg.Name+"=https://"+cfg.PeerAddr, embed.ClusterStateFlagNew
}

// clusterToken is etcd's cluster token of the job's store: members of
// different jobs never take each other for their own.
func clusterToken(token rendezvous.Token) string {
	return "gorun-" + hex.EncodeToString(token.Derive("gorun etcd cluster token v1")[:8])
}

// checkGrowth checks a growable or joining member's settings, and names
// a growable store's first member.
func (cfg *ServerConfig) checkGrowth() error {
	switch {
	case !cfg.Growable && cfg.Join == "":
		return nil
	case cfg.Growable && cfg.Join != "", (cfg.Growable || cfg.Join != "") && cfg.clustered():
		return errors.New("embedded etcd: a store is grown, joined or given its members, one of the three")
	case cfg.Token == nil:
		return errors.New("embedded etcd: a store that grows needs the job token (its members authenticate each other with it)")
	case cfg.CertFile != "":
		return errors.New("embedded etcd: a store that grows serves the job's TLS, not TLS files of the user's")
	case strings.HasSuffix(cfg.PeerAddr, ":0"):
		return fmt.Errorf("embedded etcd: a store that grows needs its member's peer port, known before it starts (have %q)", cfg.PeerAddr)
	case cfg.Join != "" && cfg.Name == "":
		return errors.New("embedded etcd: a member that joins needs its name")
	}
	if cfg.Growable && cfg.Name == "" {
		cfg.Name = MemberName(0)
	}
	return nil
}

// handOverFor bounds a leader's hand-over when it stops: a member that
// stops mid-job (its node left) hands over within a few ticks; at a job's
// end the others are stopping too, and it gives up.
const handOverFor = time.Second

// handOver makes another voting member the leader, if this one leads,
// within handOverFor: requests in flight then go on at the new leader
// instead of timing out with the old one.
func (s *Server) handOver() {
	srv := s.etcd.Server
	if srv.Lead() != uint64(srv.MemberID()) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), handOverFor)
	defer cancel()
	for _, m := range srv.Cluster().Members() {
		if m.ID == srv.MemberID() || m.IsLearner {
			continue
		}
		if srv.MoveLeader(ctx, srv.Lead(), uint64(m.ID)) == nil || ctx.Err() != nil {
			return
		}
	}
}

// rootClient is a client of this member's own socket as etcd's root.
func (s *Server) rootClient() (*clientv3.Client, error) {
	if s.root == "" {
		return nil, errors.New("this store does not grow (only a growable store's first member adds members)")
	}
	return clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + s.socket}, Username: "root", Password: s.root,
		DialTimeout: dialTimeout, Logger: zap.NewNop()})
}

// AddLearner adds a member named name, whose peers reach it at peer
// (host:port), as a learner. It returns its id and the store's members
// as etcd's initial cluster, for the new member's ServerConfig.Join.
func (s *Server) AddLearner(ctx context.Context, name, peer string) (uint64, string, error) {
	cli, err := s.rootClient()
	if err != nil {
		return 0, "", err
	}
	defer cli.Close()
	resp, err := cli.MemberAddAsLearner(ctx, []string{"https://" + peer})
	if err != nil {
		return 0, "", fmt.Errorf("add a member at %s: %w", peer, err)
	}
	var initial []string
	for _, m := range resp.Members {
		n := m.Name
		if m.ID == resp.Member.ID {
			n = name
		}
		for _, u := range m.PeerURLs {
			initial = append(initial, n+"="+u)
		}
	}
	return resp.Member.ID, strings.Join(initial, ","), nil
}

// promoteRetry spaces Promote's tries while the learner catches up.
const promoteRetry = 100 * time.Millisecond

// Promote makes learner id a voting member, once it has caught up with
// the leader (etcd refuses before), trying until ctx ends.
func (s *Server) Promote(ctx context.Context, id uint64) error {
	cli, err := s.rootClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		_, err := cli.MemberPromote(ctx, id)
		if err == nil || !errors.Is(rpctypes.Error(err), rpctypes.ErrMemberLearnerNotReady) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("promote member %x: it did not catch up with the store: %w", id, ctx.Err())
		case <-time.After(promoteRetry):
		}
	}
}

// RemoveMember removes member id (a learner that never caught up).
func (s *Server) RemoveMember(ctx context.Context, id uint64) error {
	cli, err := s.rootClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.MemberRemove(ctx, id)
	return err
}
