package jobstore

import (
	"context"
	"errors"
	"fmt"
	"path"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"

	"github.com/gorun-dev/gorun/rendezvous"
)

// jobRole is the role of the job's user (rendezvous.EtcdUser): read and
// write under the auth prefix.
const jobRole = "gorun-job"

// setUpAuth turns authentication on in the running store e, whose client
// port is not open yet: it creates root (with a random password, which
// it returns: only a growable store keeps it, for its membership calls)
// and the job's user and role, which may read and write the auth
// prefix only. It does nothing if authentication is on already (a kept
// data directory). In a store of several members every member that
// starts does it, through raft, for all: each step may be done twice
// (they are idempotent, the job user's password is the token's), and a
// member whose step fails because another turned authentication on first
// is done. So a majority of the members starts the store, member 0 or
// not.
func setUpAuth(ctx context.Context, e *embed.Etcd, cfg ServerConfig) (string, error) {
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
	enabled := func() bool {
		st, err := cli.AuthStatus(ctx)
		return err == nil && st.Enabled
	}
	if enabled() {
		return "", nil
	}
	rootPassword, err := rendezvous.NewToken()
	if err != nil {
		return "", err
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
			_, err := cli.UserAdd(ctx, rendezvous.EtcdUser, cfg.Password)
			if errors.Is(err, rpctypes.ErrUserAlreadyExist) {
				// Left by a set-up that stopped half-way: this token's password.
				_, err = cli.UserChangePassword(ctx, rendezvous.EtcdUser, cfg.Password)
			}
			return err
		}},
		{"grant the job's role", func() error { _, err := cli.UserGrantRole(ctx, rendezvous.EtcdUser, jobRole); return err }},
		{"turn authentication on", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			if cfg.clustered() && enabled() {
				return "", nil // another member finished first
			}
			return "", fmt.Errorf("embedded etcd: %s: %w", st.what, err)
		}
	}
	return string(rootPassword), nil
}

func ignoreExists(err error) error {
	if errors.Is(err, rpctypes.ErrRoleAlreadyExist) || errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return nil
	}
	return err
}
