package etcd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/rendezvous"
)

// tokenPoll spaces the reads of a token file that another node writes
// (a shared file system has no change notification to wait on).
const tokenPoll = 200 * time.Millisecond

// jobToken finds the job's secret: --rdzv-conf token_file= (created with
// a new token by the node that hosts the embedded store, when absent;
// awaited by the others), else GORUN_RDZV_TOKEN. Without either, a job
// on one node makes its own; the nodes of an embedded store shared by
// several share one through the home folder (shared: the file, which the
// caller releases; maker says whether this node made the token, or
// another agent on this host did first); an external etcd's job keeps one
// in etcd (nil here).
func jobToken(ctx context.Context, c Conf, spec jobSpec, maker bool, log logrus.FieldLogger) (_ Token, shared *sharedToken, madeHere bool, _ error) {
	if t, given, err := c.givenToken(ctx, maker, c.connect, log); given {
		return t, nil, maker, err
	}
	switch {
	case spec.embedded && spec.maxNodes <= 1:
		t, err := rendezvous.NewToken()
		return t, nil, maker, err
	case spec.embedded && os.Getenv(kubernetesEnv) != "":
		return nil, nil, false, rendezvous.BadInput(fmt.Errorf("%w: the embedded store of a job on several nodes (--nnodes=%d) needs a secret that every node shares, so that no one else on the network can join or steer the job, and Kubernetes pods share no home folder to pass one through: give every pod the same GORUN_RDZV_TOKEN from a Secret (examples/kubernetes, docs/security.md)", rendezvous.ErrBadToken, spec.maxNodes))
	case spec.embedded:
		s, err := newSharedToken(spec.runID, spec.endpoint, c.connect)
		if err != nil {
			return nil, nil, false, rendezvous.BadInput(fmt.Errorf("%w: %w", rendezvous.ErrBadToken, err))
		}
		if maker {
			made, err := s.create()
			if err != nil {
				return nil, nil, false, fmt.Errorf("share the job's token through %s: %w (or give every node the same GORUN_RDZV_TOKEN)", s.path, err)
			}
			if made {
				log.Infof("no job token given: made one for this job in %s (yours alone); the job's other nodes read it there, through the home folder they share (where they share none, give every node the same GORUN_RDZV_TOKEN)", s.path)
				return s.token, s, true, nil
			}
		}
		t, err := s.await(ctx, nil)
		if err != nil {
			return nil, nil, false, err
		}
		log.Infof("no job token given: read the job's token in %s", s.path)
		return t, s, false, nil
	}
	return nil, nil, maker, nil
}

// givenToken is the token the user gave, and whether they gave one:
// token_file (created when absent if create, else awaited up to wait),
// else GORUN_RDZV_TOKEN's. A token that cannot be used is bad input.
func (c Conf) givenToken(ctx context.Context, create bool, wait time.Duration, log logrus.FieldLogger) (_ Token, given bool, _ error) {
	switch {
	case c.tokenFile != "":
		t, err := tokenFromFile(ctx, c.tokenFlagName(), c.tokenFile, create, wait, log)
		return t, true, err
	case c.token != "":
		t, err := rendezvous.ParseToken(rendezvous.TokenEnv, []byte(c.token))
		return t, true, rendezvous.BadInput(err)
	}
	return nil, false, nil
}

// jobSpec is what jobToken needs of the job.
type jobSpec struct {
	runID, endpoint string
	embedded        bool
	maxNodes        int
}

// tokenFromFile reads the token at path; the host creates it (mode 0600)
// when it does not exist, the other nodes wait up to wait for it. flag
// names the setting that gave path, for the messages.
func tokenFromFile(ctx context.Context, flag, path string, host bool, wait time.Duration, log logrus.FieldLogger) (Token, error) {
	deadline := time.Now().Add(wait)
	for {
		// Never through a link, never blocking on a FIFO, never more than
		// a token's size (a link to /dev/zero).
		t, err := readSecretFile(path, false)
		if err == nil {
			if st, serr := os.Stat(path); serr == nil && st.Mode().Perm()&0o077 != 0 {
				log.Warnf("%s=%s is readable by other users (mode %v): anyone who reads it can join or steer the job; chmod 600 it", flag, path, st.Mode().Perm())
			}
			return t, nil
		}
		if errors.Is(err, rendezvous.ErrBadToken) {
			return nil, rendezvous.BadInput(err)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, rendezvous.BadInput(fmt.Errorf("%s=%s: %w", flag, path, err))
		}
		if host {
			t, err := rendezvous.NewToken()
			if err != nil {
				return nil, err
			}
			made, err := createToken(path, t)
			if err != nil {
				return nil, rendezvous.BadInput(fmt.Errorf("%s=%s: create it: %w", flag, path, err))
			}
			if !made {
				continue // another process made it first: read that one
			}
			log.Infof("made a new job token in %s (mode 0600); the other nodes read it there", path)
			return t, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s=%s: still missing after %v; the node hosting the store creates it (is the file system shared?)", flag, path, wait)
		}
		if err := ctxtime.Sleep(ctx, tokenPoll); err != nil {
			return nil, err
		}
	}
}

// createToken writes t to path unless a file is there already (made
// false): written in full to a temporary file beside it first and then
// linked into place, so that a node reading path never sees half a token.
func createToken(path string, t Token) (made bool, err error) {
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

// StoreToken is `gorun store`'s token: the file at path (created, mode
// 0600, when absent; flag names the setting that gave it, for messages),
// else text (GORUN_RDZV_TOKEN's, or standard input's). Its errors are
// bad input.
func StoreToken(ctx context.Context, flag, path, text string, log logrus.FieldLogger) (Token, error) {
	c := Conf{tokenFile: path, token: text, tokenFlag: flag}
	t, _, _, err := jobToken(ctx, c, jobSpec{embedded: true, maxNodes: 1}, true, log)
	return t, err
}
