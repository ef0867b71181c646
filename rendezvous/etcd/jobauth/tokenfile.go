package jobauth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/rendezvous"
)

// tokenPoll spaces the reads of a token file that another node writes
// (a shared file system has no change notification to wait on).
const tokenPoll = 200 * time.Millisecond

// JobToken finds the job's secret: the token file the user gave (g.File:
// created with a new token by the node that hosts the embedded store,
// maker, when absent; awaited by the others), else the token itself
// (g.Text, GORUN_RDZV_TOKEN's). Without either, a job on one node makes
// its own; the nodes of an embedded store shared by several share one
// through the home folder (shared: the file, which the caller releases;
// madeHere says whether this node made the token, or another agent on
// this host did first); an external etcd's job keeps one in etcd (nil
// here).
func JobToken(ctx context.Context, g Given, job Job, maker bool, log logrus.FieldLogger) (_ Token, shared *SharedToken, madeHere bool, _ error) {
	if t, given, err := g.Read(ctx, maker, job.Wait, log); given {
		return t, nil, maker, err
	}
	switch {
	case job.Embedded && job.MaxNodes <= 1:
		t, err := rendezvous.NewToken()
		return t, nil, maker, err
	case job.Embedded && os.Getenv(kubernetesEnv) != "":
		return nil, nil, false, rendezvous.BadInput(setting.Errorf("%w: the embedded store of a job on several nodes (%s=%d) needs a secret that every node shares, so that no one else on the network can join or steer the job, and Kubernetes pods share no home folder to pass one through: give every pod the same GORUN_RDZV_TOKEN from a Secret (examples/kubernetes, docs/security.md)", rendezvous.ErrBadToken, setting.Name("NNodes"), job.MaxNodes))
	case job.Embedded:
		s, err := newSharedToken(job.RunID, job.Endpoint, job.Wait)
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
		t, err := s.Await(ctx, nil)
		if err != nil {
			return nil, nil, false, err
		}
		log.Infof("no job token given: read the job's token in %s", s.path)
		return t, s, false, nil
	}
	return nil, nil, maker, nil
}

// Given is the job token the user gave, if any: a token file (File:
// --rdzv-conf token_file, or GORUN_RDZV_TOKEN_FILE; Setting names the
// setting that gave it, for messages, "" for the rendezvous's
// token_file), else the token itself (Text: GORUN_RDZV_TOKEN's).
type Given struct {
	File, Text string
	Setting    setting.Name
}

// settingName names the setting that gave the token file, for
// messages: the command's own (Setting) when it gave one, else the
// rendezvous's token_file key.
func (g Given) settingName() setting.Name {
	if g.Setting != "" {
		return g.Setting
	}
	return setting.Name("Conf.token_file")
}

// Read is the token the user gave, and whether they gave one: the token
// file (created when absent if create, else awaited up to wait), else
// the token's text. A token that cannot be used is bad input.
func (g Given) Read(ctx context.Context, create bool, wait time.Duration, log logrus.FieldLogger) (_ Token, given bool, _ error) {
	switch {
	case g.File != "":
		t, err := tokenFromFile(ctx, g.settingName(), g.File, create, wait, log)
		return t, true, err
	case g.Text != "":
		t, err := rendezvous.ParseToken(rendezvous.TokenEnv, []byte(g.Text))
		return t, true, rendezvous.BadInput(err)
	}
	return nil, false, nil
}

// Job is what JobToken needs of the job: its run id and the store's
// endpoint (--rdzv-endpoint's first address, the same on every node),
// which name the token file its nodes share; whether its store is the
// embedded one (c10d, embedded) rather than an external etcd; its most
// nodes; and how long a node waits for a token file that another node
// writes (connect_timeout).
type Job struct {
	RunID, Endpoint string
	Embedded        bool
	MaxNodes        int
	Wait            time.Duration
}

// tokenFromFile reads the token at path; the host creates it (mode 0600)
// when it does not exist, the other nodes wait up to wait for it. from
// names the setting that gave path, for the messages.
func tokenFromFile(ctx context.Context, from setting.Name, path string, host bool, wait time.Duration, log logrus.FieldLogger) (Token, error) {
	deadline := time.Now().Add(wait)
	for {
		// Never through a link, never blocking on a FIFO, never more than
		// a token's size (a link to /dev/zero).
		t, err := readSecretFile(path, false)
		if err == nil {
			if st, serr := os.Stat(path); serr == nil && st.Mode().Perm()&0o077 != 0 {
				log.Warnf("the job's token file %s is readable by other users (mode %v): anyone who reads it can join or steer the job; chmod 600 it", path, st.Mode().Perm())
			}
			return t, nil
		}
		if errors.Is(err, rendezvous.ErrBadToken) {
			return nil, rendezvous.BadInput(err)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, rendezvous.BadInput(setting.Errorf("%s=%s: %w", from, path, err))
		}
		if host {
			t, err := rendezvous.NewToken()
			if err != nil {
				return nil, err
			}
			made, err := createToken(path, t)
			if err != nil {
				return nil, rendezvous.BadInput(setting.Errorf("%s=%s: create it: %w", from, path, err))
			}
			if !made {
				continue // another process made it first: read that one
			}
			log.Infof("made a new job token in %s (mode 0600); the other nodes read it there", path)
			return t, nil
		}
		if time.Now().After(deadline) {
			return nil, setting.Errorf("%s=%s: still missing after %v; the node hosting the store creates it (is the file system shared?)", from, path, wait)
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
// 0600, when absent; from names the setting that gave it, for messages),
// else text (GORUN_RDZV_TOKEN's, or standard input's). Its errors are
// bad input.
func StoreToken(ctx context.Context, from setting.Name, path, text string, log logrus.FieldLogger) (Token, error) {
	t, _, _, err := JobToken(ctx, Given{File: path, Text: text, Setting: from}, Job{Embedded: true, MaxNodes: 1}, true, log)
	return t, err
}
