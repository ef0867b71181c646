package jobauth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/rendezvous"
)

// A job on several nodes given no token (no token_file, no
// GORUN_RDZV_TOKEN) shares one through the user's home folder, which the
// nodes of an HPC cluster share, as torchrun needs no token line: the
// node that hosts the store writes a fresh token to a file of the job's
// (named after the run id and the store's port) in a folder only the
// user can open, and the others read it there. The file is the user's
// alone, as the user's SSH keys are; anyone who can read it could also
// read the job's code.
//
// A file left by an earlier job of the same run id (its host killed) is
// never used: the host replaces it, and a node that read it before is
// refused by the store and waits for the new one. The host keeps the file
// flock'ed while it lives, so that a second agent on the same host (a
// multi-node job tried on one machine) reads the live file instead of
// replacing it; it removes the file when it ends.

// sharedTokenDir is the folder of shared tokens, under the home folder.
const sharedTokenDir = ".gorun/tokens"

// maxTokenFile bounds a token file's size (a token is 64 hex characters).
const maxTokenFile = 4096

// SharedToken is a job's token shared through a file in the home folder
// (JobToken).
type SharedToken struct {
	path string
	// wait is how long a reader waits for the file (connect_timeout),
	// from start on.
	wait  time.Duration
	start time.Time
	// lock is the file, flock'ed, when this process made it.
	lock *os.File
	// token is the token this process wrote or read last.
	token Token
}

// kubernetesEnv is set in every Kubernetes pod; pods share no home folder.
const kubernetesEnv = "KUBERNETES_SERVICE_HOST"

// Path is the shared token file's path.
func (s *SharedToken) Path() string { return s.path }

// ReadSharedToken reads the token that the job runID, whose store is at
// endpoint, shares through the home folder (a node that does not wait
// for it: gorun stop).
func ReadSharedToken(runID, endpoint string) (Token, error) {
	shared, err := newSharedToken(runID, endpoint, 0)
	if err != nil {
		return nil, err
	}
	return readTokenFile(shared.path)
}

// newSharedToken names the shared token file of the job runID whose store
// is at endpoint (by its port), making the private folder when missing. It refuses a
// folder that others can open or that is not the user's.
func newSharedToken(runID, endpoint string, wait time.Duration) (*SharedToken, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, fmt.Errorf("no home folder to share the job's token through (%w): give every node the same GORUN_RDZV_TOKEN", err)
	}
	dir := filepath.Join(home, sharedTokenDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("share the job's token: %w", err)
	}
	// Its parent too is the user's, and no one else may rename in it
	// (another user could put a folder of theirs in the tokens' place).
	parent, err := private.OpenOwnFolder(filepath.Dir(dir))
	if err != nil {
		return nil, fmt.Errorf("share the job's token: %w", err)
	}
	parent.Close()
	st, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("share the job's token: %w", err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.IsDir():
		return nil, fmt.Errorf("share the job's token: %s is not a folder (a link?); remove it, or give every node the same GORUN_RDZV_TOKEN", dir)
	case sys == nil || int(sys.Uid) != os.Getuid():
		return nil, fmt.Errorf("share the job's token: %s is not yours; remove it, or give every node the same GORUN_RDZV_TOKEN", dir)
	case st.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("share the job's token: %s is open to other users (mode %v): chmod 700 it", dir, st.Mode().Perm())
	}
	// The run id and the store's port, not its host: nodes may spell the
	// host differently (localhost, 127.0.0.1, node0, node0.cluster).
	port := endpoint
	if _, p, err := net.SplitHostPort(endpoint); err == nil {
		port = p
	}
	sum := sha256.Sum256([]byte(runID + "\x00" + port))
	name := fileSafe(runID) + "-" + hex.EncodeToString(sum[:8])
	return &SharedToken{path: filepath.Join(dir, name), wait: wait, start: time.Now()}, nil
}

// fileSafe keeps the letters, digits, '.', '-' and '_' of s (at most 40):
// a readable part of a file name; the hash beside it keeps names apart.
func fileSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 40 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return strings.TrimLeft(b.String(), ".")
}

// create writes a fresh token to the file, replacing one an earlier job
// left, and keeps the file locked until release. made is false when a
// live process (another agent on this host) holds the file: then read it.
func (s *SharedToken) create() (made bool, err error) {
	if old, err := openTokenFile(s.path); err == nil {
		busy := syscall.Flock(int(old.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
		if !busy {
			// Its maker is gone: an earlier job's, never to be reused.
			// Removed under its lock, so no one else takes it for live.
			os.Remove(s.path)
		}
		old.Close()
		if busy {
			return false, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	t, err := rendezvous.NewToken()
	if err != nil {
		return false, err
	}
	f, err := os.CreateTemp(filepath.Dir(s.path), ".new-*") // mode 0600
	if err != nil {
		return false, err
	}
	defer os.Remove(f.Name())
	// Locked before it has its name: no one can take it for a dead one.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return false, err
	}
	_, err = f.Write(append(t, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Link(f.Name(), s.path)
	}
	if err != nil {
		f.Close()
		if errors.Is(err, fs.ErrExist) {
			return false, nil // another agent made it just now
		}
		return false, err
	}
	s.lock, s.token = f, t
	return true, nil
}

// Release removes the file this process made; nothing for a reader. It
// is safe on nil.
func (s *SharedToken) Release() {
	if s == nil || s.lock == nil {
		return
	}
	if f, err := openTokenFile(s.path); err == nil {
		same, _ := sameFile(f, s.lock)
		f.Close()
		if same {
			os.Remove(s.path)
		}
	}
	s.lock.Close()
	s.lock = nil
}

// Await reads the file's token, waiting (up to the Job's Wait from its
// naming on) for it to appear and to differ from stale (a token the
// store refused; nil: any).
func (s *SharedToken) Await(ctx context.Context, stale Token) (Token, error) {
	deadline := s.start.Add(s.wait)
	for {
		t, err := readTokenFile(s.path)
		switch {
		case err == nil && (stale == nil || !bytes.Equal(t, stale)):
			s.token = t
			return t, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
		if time.Now().After(deadline) {
			what := "did not appear"
			if err == nil {
				what = "still holds a token the store refuses (an earlier job's)"
			}
			return nil, setting.Errorf("%w: no job token given, and the job's token file %s, which the node hosting the store writes, %s within %v (%s): does the store's host run this job (the same %s and port), and do the two share your home folder? If they share none, give every node the same GORUN_RDZV_TOKEN (docs/security.md)",
				rendezvous.ErrBadToken, s.path, what, s.wait, setting.Name("Conf.connect_timeout"), setting.Name("RunID"))
		}
		if err := ctxtime.Sleep(ctx, tokenPoll); err != nil {
			return nil, err
		}
	}
}

// openTokenFile opens path for reading if it is a regular file of this
// user's: never a link, a FIFO (which would block) or another's file.
func openTokenFile(path string) (*os.File, error) { return openSecretFile(path, true) }

// openSecretFile opens path for reading if it is a regular file under
// maxTokenFile bytes, never through a link nor blocking on a FIFO (or
// growing without end, as /dev/zero), owned by this user (mine) or by
// this user or root (a token_file an administrator provides): another
// user could read it and change it.
func openSecretFile(path string, mine bool) (*os.File, error) {
	f, st, err := private.OpenRegular(path)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a link, not a token file: remove it", path)
	}
	if err != nil && !errors.Is(err, private.ErrNotRegular) {
		return nil, err
	}
	var sys *syscall.Stat_t
	if err == nil {
		sys, _ = st.Sys().(*syscall.Stat_t)
	}
	if err == nil && sys != nil && int(sys.Uid) != os.Getuid() && (mine || sys.Uid != 0) {
		f.Close()
		return nil, fmt.Errorf("%s belongs to %s: a token file must be yours (or root's), as its owner can read it and change it, and so join or steer the job", path, private.UserName(int(sys.Uid)))
	}
	if err != nil || sys == nil || st.Size() > maxTokenFile {
		f.Close()
		whose, fix := "", "give the path of a regular file that holds the token"
		if mine {
			whose, fix = " of yours", "remove it"
		}
		return nil, fmt.Errorf("%s is not a token file%s (a regular file under %d bytes, not a link): %s", path, whose, maxTokenFile, fix)
	}
	return f, nil
}

// readTokenFile reads the token in path (openTokenFile's checks).
func readTokenFile(path string) (Token, error) { return readSecretFile(path, true) }

// readSecretFile reads the token in path (openSecretFile's checks).
func readSecretFile(path string, mine bool) (Token, error) {
	f, err := openSecretFile(path, mine)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile))
	if err != nil {
		return nil, err
	}
	return rendezvous.ParseToken("the job's token file "+path, b)
}

// sameFile says whether a and b are the same file.
func sameFile(a, b *os.File) (bool, error) {
	sa, err := a.Stat()
	if err != nil {
		return false, err
	}
	sb, err := b.Stat()
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}
