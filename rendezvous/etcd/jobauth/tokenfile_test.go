package jobauth

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// jobTokenOf calls JobToken for a job of nodes nodes of run "job" whose
// nodes wait up to wait for a token file.
func jobTokenOf(ctx context.Context, g Given, wait time.Duration, embedded, host bool, nodes int, log logrus.FieldLogger) (Token, error) {
	t, shared, _, err := JobToken(ctx, g, Job{RunID: "job", Endpoint: "n0:29400", Embedded: embedded, MaxNodes: nodes, Wait: wait}, host, log)
	shared.Release()
	return t, err
}

func TestJobToken(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv(kubernetesEnv, "")
	dir := t.TempDir()
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx := context.Background()
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	// Hostile token files: a FIFO would block, /dev/zero never ends.
	fifo, zero, huge := filepath.Join(dir, "fifo"), filepath.Join(dir, "zero"), filepath.Join(dir, "huge")
	syscall.Mkfifo(fifo, 0o600)
	os.Symlink("/dev/zero", zero)
	os.WriteFile(huge, bytes.Repeat([]byte("a"), 1<<20), 0o600)
	tests := []struct {
		name     string
		g        Given
		wait     time.Duration
		embedded bool
		host     bool
		nodes    int
		want     string // "" none, "random", or the token
		err      string
	}{
		{name: "external etcd without a token keeps one in etcd", nodes: 4, want: ""},
		{name: "embedded, one node", embedded: true, host: true, nodes: 1, want: "random"},
		{name: "embedded, several nodes, no token: shared through the home folder", embedded: true, host: true, nodes: 2, want: "random"},
		{name: "environment", g: Given{Text: "  0123456789abcdef0123  \n"}, embedded: true, nodes: 2, want: "0123456789abcdef0123"},
		{name: "too short", g: Given{Text: "short"}, nodes: 2, err: "at least 16"},
		{name: "short file", g: Given{File: short}, nodes: 2, err: "at least 16"},
		{name: "FIFO", g: Given{File: fifo}, nodes: 2, err: "not a token file"},
		{name: "link to /dev/zero", g: Given{File: zero}, nodes: 2, err: "is a link"},
		{name: "a megabyte", g: Given{File: huge}, nodes: 2, err: "under 4096 bytes"},
		{name: "missing file, not the host", g: Given{File: filepath.Join(dir, "none")}, wait: 10 * time.Millisecond, nodes: 2, err: "still missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := jobTokenOf(ctx, tt.g, tt.wait, tt.embedded, tt.host, tt.nodes, log)
			switch {
			case tt.err != "":
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("JobToken = %q, %v; want an error naming %q", tok, err, tt.err)
				}
			case err != nil:
				t.Fatal(err)
			case tt.want == "random":
				if len(tok) != 64 {
					t.Errorf("token %q: want 64 random hex characters", tok)
				}
			case string(tok) != tt.want:
				t.Errorf("token %q; want %q", tok, tt.want)
			}
		})
	}
	t.Run("the host creates the file, a node reads it", func(t *testing.T) {
		path := filepath.Join(dir, "job.token")
		made, err := jobTokenOf(ctx, Given{File: path}, 0, true, true, 2, log)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("token file %v, %v; want mode 0600", st, err)
		}
		read, err := jobTokenOf(ctx, Given{File: path}, 0, true, false, 2, log)
		if err != nil || string(read) != string(made) {
			t.Errorf("node read %q, %v; host made %q", read, err, made)
		}
	})
	t.Run("several hosts and nodes at once agree", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "job.token")
		got := make([]Token, 16)
		errs := make([]error, len(got))
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() {
				got[i], errs[i] = jobTokenOf(ctx, Given{File: path}, 10*time.Second, true, i%2 == 0, 2, log)
			})
		}
		wg.Wait()
		for i := range got {
			if errs[i] != nil || string(got[i]) != string(got[0]) {
				t.Errorf("agent %d: %q, %v; agent 0 has %q", i, got[i], errs[i], got[0])
			}
		}
		if files, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*")); len(files) != 1 {
			t.Errorf("files left beside the token: %v", files)
		}
	})
}

// TestTokenFileOfAnotherUserRefused: a token_file another user owns (one
// planted in a shared folder, mode 0644) is refused, naming its owner: its
// owner could read and change the job's token. It used to be taken with
// only a warning that others can read it.
func TestTokenFileOfAnotherUserRefused(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	path := filepath.Join(t.TempDir(), "planted.token")
	if err := os.WriteFile(path, []byte("0123456789abcdef0123456789abcdef"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := JobToken(context.Background(), Given{File: path}, Job{Embedded: true, MaxNodes: 2}, false, logrus.New())
	if err == nil || !strings.Contains(err.Error(), "belongs to user "+proctest.OtherUserName) {
		t.Errorf("JobToken with another user's token file: %v; want a refusal naming %s", err, proctest.OtherUserName)
	}
}
