package etcd

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
)

// jobRole is the role of EtcdUser: read and write under the auth prefix.
const jobRole = "gorun-job"

// setUpAuth turns authentication on in the running store e, whose client
// port is not open yet: it creates root (with a random password nobody
// keeps) and the job's user and role, which may read and write the auth
// prefix only. It does nothing if authentication is on already (a kept
// data directory). In a store of several members, member 0 does it,
// through raft, for all; the others wait until it is on.
func setUpAuth(ctx context.Context, e *embed.Etcd, cfg ServerConfig) error {
	prefix := cfg.AuthPrefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	// The jobs' keys are PREFIX/RUN/...: the grant ends at the slash, so
	// that /gorun does not also cover /gorun-other.
	prefix = path.Clean(prefix) + "/"
	ctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	cli := v3client.New(e.Server)
	defer cli.Close()
	if cfg.clustered() && cfg.Member != 0 {
		return awaitAuth(ctx, cli, cfg)
	}
	if st, err := cli.AuthStatus(ctx); err == nil && st.Enabled {
		return nil
	}
	rootPassword, err := NewToken()
	if err != nil {
		return err
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"add role root", func() error { _, err := cli.RoleAdd(ctx, "root"); return ignoreExists(err) }},
		{"add user root", func() error { _, err := cli.UserAdd(ctx, "root", string(rootPassword)); return ignoreExists(err) }},
		{"grant root", func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err }},
		{"add the job's role", func() error { _, err := cli.RoleAdd(ctx, jobRole); return ignoreExists(err) }},
		{"grant the job's prefix", func() error {
			_, err := cli.RoleGrantPermission(ctx, jobRole, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"add the job's user", func() error {
			_, err := cli.UserAdd(ctx, EtcdUser, cfg.Password)
			if errors.Is(err, rpctypes.ErrUserAlreadyExist) {
				// Left by a set-up that stopped half-way: this token's password.
				_, err = cli.UserChangePassword(ctx, EtcdUser, cfg.Password)
			}
			return err
		}},
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

// authPoll spaces a member's checks that member 0 turned authentication
// on (a setting read from the member's own state, so cheap).
const authPoll = 20 * time.Millisecond

// awaitAuth waits until the store's authentication is on.
func awaitAuth(ctx context.Context, cli *clientv3.Client, cfg ServerConfig) error {
	for {
		st, err := cli.AuthStatus(ctx)
		if err == nil && st.Enabled {
			return nil
		}
		t := time.NewTimer(authPoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("embedded etcd: member %d: member 0 (%s) did not set up authentication within %v", cfg.Member, cfg.Cluster[0], cfg.ReadyTimeout)
		}
	}
}

func ignoreExists(err error) error {
	if errors.Is(err, rpctypes.ErrRoleAlreadyExist) || errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return nil
	}
	return err
}
