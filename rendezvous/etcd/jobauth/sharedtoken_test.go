package jobauth

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// sharedHome points the home folder at a fresh one and clears the
// Kubernetes marker. Not parallel: it sets the environment.
func sharedHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv(kubernetesEnv, "")
	return home
}

func quietLog() logrus.FieldLogger {
	log := logrus.New()
	log.SetOutput(io.Discard)
	return log
}

// TestSharedTokenMakerAndReaders: the maker writes a private file the
// readers get the same token from; a second maker on the host while the
// first lives reads the first one's token; the file goes with its maker.
func TestSharedTokenMakerAndReaders(t *testing.T) {
	home := sharedHome(t)
	ctx := context.Background()
	spec := Job{RunID: "job:42 a/b", Endpoint: "n0:29400", Embedded: true, MaxNodes: 2, Wait: 5 * time.Second}
	tok, shared, made, err := JobToken(ctx, Given{}, spec, true, quietLog())
	if err != nil || !made || shared == nil {
		t.Fatalf("maker: %v, made %v, shared %v", err, made, shared)
	}
	if !strings.HasPrefix(shared.path, filepath.Join(home, ".gorun", "tokens")+"/job_42_a_b-") {
		t.Errorf("token file %s: want a readable name under ~/.gorun/tokens", shared.path)
	}
	for _, p := range []string{filepath.Join(home, ".gorun", "tokens"), shared.path} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: %v, %v; want it private to the user", p, st, err)
		}
	}
	read, _, _, err := JobToken(ctx, Given{}, spec, false, quietLog())
	if err != nil || !bytes.Equal(read, tok) {
		t.Errorf("reader got %q, %v; maker made %q", read, err, tok)
	}
	second, _, made2, err := JobToken(ctx, Given{}, spec, true, quietLog())
	if err != nil || made2 || !bytes.Equal(second, tok) {
		t.Errorf("second maker on the host: %q, made %v, %v; want the live maker's %q", second, made2, err, tok)
	}
	spelled, _, _, err := JobToken(ctx, Given{}, Job{RunID: "job:42 a/b", Endpoint: "127.0.0.1:29400", Embedded: true, MaxNodes: 2, Wait: 5 * time.Second}, false, quietLog())
	if err != nil || !bytes.Equal(spelled, tok) {
		t.Errorf("a node that spells the store's host otherwise got %q, %v; want the job's %q", spelled, err, tok)
	}
	other, otherShared, _, err := JobToken(ctx, Given{}, Job{RunID: "job:42 a/b", Endpoint: "n0:29401", Embedded: true, MaxNodes: 2, Wait: 5 * time.Second}, true, quietLog())
	if err != nil || bytes.Equal(other, tok) {
		t.Errorf("a job of another port got %q, %v; want a token of its own", other, err)
	}
	otherShared.Release()
	shared.Release()
	if _, err := os.Stat(shared.path); !os.IsNotExist(err) {
		t.Errorf("token file after its maker ended: %v; want it removed", err)
	}
}

// TestSharedTokenStaleFileReplaced: a file an earlier job's maker left
// (killed: no lock) is replaced by the next maker, and a reader that read
// the stale token gets the new one when it asks for a token other than
// the refused one.
func TestSharedTokenStaleFileReplaced(t *testing.T) {
	sharedHome(t)
	ctx := context.Background()
	s, err := newSharedToken("job", "n0:29400", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stale := []byte("0123456789abcdef0123456789abcdef")
	if err := os.WriteFile(s.path, append(stale, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := newSharedToken("job", "n0:29400", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got, err := reader.Await(ctx, nil)
	if err != nil || !bytes.Equal(got, stale) {
		t.Fatalf("reader before the maker: %q, %v", got, err)
	}
	made, err := s.create()
	if err != nil || !made || bytes.Equal(s.token, stale) {
		t.Fatalf("maker over a stale file: made %v, %v, token %q", made, err, s.token)
	}
	defer s.Release()
	fresh, err := reader.Await(ctx, got)
	if err != nil || !bytes.Equal(fresh, s.token) {
		t.Errorf("reader after refusal: %q, %v; want the maker's %q", fresh, err, s.token)
	}
}

// TestSharedTokenRefusals: a reader that never sees the file says what to
// do; an unsafe folder or file is refused; Kubernetes pods, which share
// no home folder, get the Secret's advice at once.
func TestSharedTokenRefusals(t *testing.T) {
	ctx := context.Background()
	spec := Job{RunID: "job", Endpoint: "n0:29400", Embedded: true, MaxNodes: 2, Wait: 200 * time.Millisecond}
	tests := []struct {
		name  string
		setup func(t *testing.T, home string, path string)
		maker bool
		err   string
	}{
		{name: "never written", err: "did not appear within 200ms"},
		{name: "kubernetes", setup: func(t *testing.T, _, _ string) { t.Setenv(kubernetesEnv, "10.0.0.1") }, err: "Secret"},
		{name: "parent folder open to others", setup: func(t *testing.T, home, _ string) {
			os.Chmod(filepath.Join(home, ".gorun"), 0o777)
		}, err: "chmod go-w"},
		{name: "folder open to others", setup: func(t *testing.T, home, _ string) {
			os.Chmod(filepath.Join(home, ".gorun", "tokens"), 0o755)
		}, err: "chmod 700"},
		{name: "folder is a link", setup: func(t *testing.T, home, _ string) {
			tokens := filepath.Join(home, ".gorun", "tokens")
			os.Remove(tokens)
			os.Symlink(t.TempDir(), tokens)
		}, maker: true, err: "not a folder"},
		{name: "file is a link", setup: func(t *testing.T, home, path string) {
			os.Symlink(filepath.Join(home, "elsewhere"), path)
		}, err: "is a link"},
		{name: "file is a FIFO", setup: func(t *testing.T, _, path string) {
			syscall.Mkfifo(path, 0o600)
		}, maker: true, err: "not a token file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := sharedHome(t)
			s, err := newSharedToken(spec.RunID, spec.Endpoint, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, home, s.path)
			}
			tok, shared, _, err := JobToken(ctx, Given{}, spec, tt.maker, quietLog())
			shared.Release()
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("JobToken = %q, %v; want an error naming %q", tok, err, tt.err)
			}
		})
	}
}
