package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
)

// jobRole is the role of EtcdUser: read and write under the auth prefix.
const jobRole = "gorun-job"

// setUpAuth starts etcd once on cfg.Dir with its client port on a Unix
// socket inside that (private) directory, creates root (with a random
// password nobody keeps) and the job's user and role, turns
// authentication on, and stops. The real start that follows finds
// authentication on from its first request.
func setUpAuth(ctx context.Context, cfg ServerConfig, logger *zap.Logger) error {
	prefix := cfg.AuthPrefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	// The jobs' keys are PREFIX/RUN/...: the grant ends at the slash, so
	// that /gorun does not also cover /gorun-other.
	prefix = path.Clean(prefix) + "/"
	if _, err := os.Stat(filepath.Join(cfg.Dir, "member")); err == nil {
		return nil // a data directory kept from an earlier start is set up
	}
	ec := embedConfig(cfg, logger)
	// No client listener: the set-up goes through an in-process client.
	ec.ListenClientUrls, ec.AdvertiseClientUrls = nil, nil
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return fmt.Errorf("embedded etcd: set up authentication: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("embedded etcd: set up authentication: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
	cli := v3client.New(e.Server)
	defer cli.Close()
	rootPassword, err := NewToken()
	if err != nil {
		return err
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"add role root", func() error { _, err := cli.RoleAdd(ctx, "root"); return ignoreExists(err) }},
		{"add user root", func() error { _, err := cli.UserAdd(ctx, "root", string(rootPassword)); return err }},
		{"grant root", func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err }},
		{"add the job's role", func() error { _, err := cli.RoleAdd(ctx, jobRole); return err }},
		{"grant the job's prefix", func() error {
			_, err := cli.RoleGrantPermission(ctx, jobRole, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"add the job's user", func() error { _, err := cli.UserAdd(ctx, EtcdUser, cfg.Password); return err }},
		{"grant the job's role", func() error { _, err := cli.UserGrantRole(ctx, EtcdUser, jobRole); return err }},
		{"turn authentication on", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			return fmt.Errorf("embedded etcd: %s: %w", st.what, err)
		}
	}
	return nil
}

func ignoreExists(err error) error {
	if errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return nil
	}
	return err
}
