package elastic

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	etcdrdzv "github.com/gorun-dev/gorun/rendezvous/etcd"
)

// tokenPoll spaces the reads of a token file that another node writes
// (a shared file system has no change notification to wait on).
const tokenPoll = 200 * time.Millisecond

// jobToken finds the job's secret: --rdzv-conf token_file= (created with
// a new token by the node that hosts the embedded store, when absent;
// awaited by the others), else GORUN_RDZV_TOKEN. Without either, a job
// on one node makes its own; an embedded store shared by several nodes
// refuses to start; an external etcd's job keeps one in etcd (nil here).
func jobToken(ctx context.Context, c conf, embedded, host bool, maxNodes int, log logrus.FieldLogger) (etcdrdzv.Token, error) {
	switch {
	case c.tokenFile != "":
		return tokenFromFile(ctx, c.tokenFile, host, c.connect, log)
	case c.token != "":
		t, err := etcdrdzv.ParseToken(tokenEnv, []byte(c.token))
		if err != nil {
			return nil, usage(err)
		}
		return t, nil
	case embedded && maxNodes <= 1:
		return etcdrdzv.NewToken()
	case embedded:
		return nil, usage(fmt.Errorf("%w: the embedded store of a job on several nodes (--nnodes=%d) needs a secret that every node shares, so that no one else on the network can join or steer the job: give every node --rdzv-conf token_file=PATH on a shared file system (the node hosting the store creates it), or the same GORUN_RDZV_TOKEN (under Slurm: export it in the batch script before srun, as examples/slurm/train.sbatch does; see docs/security.md)", etcdrdzv.ErrBadToken, maxNodes))
	}
	return nil, nil
}

// tokenFromFile reads the token at path; the host creates it (mode 0600)
// when it does not exist, the other nodes wait up to wait for it.
func tokenFromFile(ctx context.Context, path string, host bool, wait time.Duration, log logrus.FieldLogger) (etcdrdzv.Token, error) {
	deadline := time.Now().Add(wait)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			if st, serr := os.Stat(path); serr == nil && st.Mode().Perm()&0o077 != 0 {
				log.Warnf("--rdzv-conf token_file=%s is readable by other users (mode %v): anyone who reads it can join or steer the job; chmod 600 it", path, st.Mode().Perm())
			}
			t, perr := etcdrdzv.ParseToken("token_file "+path, b)
			if perr != nil {
				return nil, usage(perr)
			}
			return t, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, usage(fmt.Errorf("--rdzv-conf token_file=%s: %w", path, err))
		}
		if host {
			t, err := etcdrdzv.NewToken()
			if err != nil {
				return nil, err
			}
			made, err := createToken(path, t)
			if err != nil {
				return nil, usage(fmt.Errorf("--rdzv-conf token_file=%s: create it: %w", path, err))
			}
			if !made {
				continue // another process made it first: read that one
			}
			log.Infof("made a new job token in %s (mode 0600); the other nodes read it there", path)
			return t, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("--rdzv-conf token_file=%s: still missing after %v; the node hosting the store creates it (is the file system shared?)", path, wait)
		}
		t := time.NewTimer(tokenPoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

// createToken writes t to path unless a file is there already (made
// false): written in full to a temporary file beside it first and then
// linked into place, so that a node reading path never sees half a token.
func createToken(path string, t etcdrdzv.Token) (made bool, err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".new-")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(append(t, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	// CreateTemp makes the file 0600.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
