package etcd

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

func TestParseConf(t *testing.T) {
	tests := []struct {
		name string
		kv   map[string]string
		env  map[string]string
		want func(Conf) bool
		err  string
		warn string
	}{
		{name: "defaults", want: func(c Conf) bool {
			return c.lastCall == 30*time.Second && c.join == 600*time.Second && c.leaseTTL == 4*time.Second && c.prefix == "/gorun" && c.isHost == nil && c.connect == time.Minute && c.storeLogLevel == "panic"
		}},
		{name: "store log level", kv: map[string]string{"store_log_level": "info"}, want: func(c Conf) bool { return c.storeLogLevel == "info" }},
		{name: "bad store log level", kv: map[string]string{"store_log_level": "loud"}, err: `store_log_level="loud": want debug, info, warn, error, panic`},
		{name: "is_host=false is kept", kv: map[string]string{"is_host": "false", "connect_timeout": "5"},
			want: func(c Conf) bool { return c.isHost != nil && !*c.isHost && c.connect == 5*time.Second }},
		{name: "token file from the environment", env: map[string]string{"GORUN_RDZV_TOKEN_FILE": "/t"},
			want: func(c Conf) bool { return c.tokenFile == "/t" }},
		{name: "values", kv: map[string]string{"last_call_timeout": "0.5", "join_timeout": "2m", "lease_ttl": "3", "is_host": "true", "etcd_prefix": "/x"},
			want: func(c Conf) bool {
				return c.lastCall == 500*time.Millisecond && c.join == 2*time.Minute && c.leaseTTL == 3*time.Second && c.isHost != nil && *c.isHost && c.prefix == "/x"
			}},
		{name: "secrets from the environment", env: map[string]string{"GORUN_RDZV_USER": "u", "GORUN_RDZV_PASSWORD": "p", "GORUN_RDZV_CACERT": "/ca"},
			want: func(c Conf) bool { return c.user == "u" && c.password == "p" && c.tls.TrustedCAFile == "/ca" }},
		{name: "flag beats environment", kv: map[string]string{"user": "flag"}, env: map[string]string{"GORUN_RDZV_USER": "env"},
			want: func(c Conf) bool { return c.user == "flag" }},
		{name: "bad duration", kv: map[string]string{"join_timeout": "soon"}, err: "join_timeout"},
		{name: "bad bool", kv: map[string]string{"is_host": "maybe"}, err: "is_host"},
		{name: "cert without key", kv: map[string]string{"cert": "/c"}, err: "cert and key go together"},
		{name: "unknown torchrun key", kv: map[string]string{"read_timeout": "60"}, warn: "read_timeout",
			want: func(Conf) bool { return true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var logs bytes.Buffer
			log := logrus.New()
			log.SetOutput(&logs)
			c, err := parseConf(tt.kv, log)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parseConf(%v) error = %v; want one naming %q", tt.kv, err, tt.err)
				}
				return
			}
			if err != nil || !tt.want(c) {
				t.Fatalf("parseConf(%v) = %+v, %v", tt.kv, c, err)
			}
			if tt.warn != "" && !strings.Contains(logs.String(), tt.warn) {
				t.Errorf("no warning about %q: %s", tt.warn, logs.String())
			}
			if strings.Contains(logs.String(), c.password) && c.password != "" {
				t.Errorf("password logged: %s", logs.String())
			}
		})
	}
}

func TestIsLocal(t *testing.T) {
	tests := []struct {
		endpoint, local string
		want            bool
	}{
		{"127.0.0.2:1", "127.0.0.2", true},
		{"127.0.0.1:1", "127.0.0.2", false},
		{"localhost:1", "", true},
		{"127.0.0.1:1", "", true},
		{"192.0.2.77:1", "", false},
		{"nonsense", "", false},
	}
	for _, tt := range tests {
		if got := isLocal(context.Background(), tt.endpoint, tt.local); got != tt.want {
			t.Errorf("isLocal(%q, %q) = %v; want %v", tt.endpoint, tt.local, got, tt.want)
		}
	}
}

// jobTokenOf calls jobToken for a job of nodes nodes of run "job".
func jobTokenOf(ctx context.Context, c Conf, embedded, host bool, nodes int, log logrus.FieldLogger) (Token, error) {
	t, shared, _, err := jobToken(ctx, c, jobSpec{runID: "job", endpoint: "n0:29400", embedded: embedded, maxNodes: nodes}, host, log)
	shared.release()
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
		c        Conf
		embedded bool
		host     bool
		nodes    int
		want     string // "" none, "random", or the token
		err      string
	}{
		{name: "external etcd without a token keeps one in etcd", nodes: 4, want: ""},
		{name: "embedded, one node", embedded: true, host: true, nodes: 1, want: "random"},
		{name: "embedded, several nodes, no token: shared through the home folder", embedded: true, host: true, nodes: 2, want: "random"},
		{name: "environment", c: Conf{token: "  0123456789abcdef0123  \n"}, embedded: true, nodes: 2, want: "0123456789abcdef0123"},
		{name: "too short", c: Conf{token: "short"}, nodes: 2, err: "at least 16"},
		{name: "short file", c: Conf{tokenFile: short}, nodes: 2, err: "at least 16"},
		{name: "FIFO", c: Conf{tokenFile: fifo}, nodes: 2, err: "not a token file"},
		{name: "link to /dev/zero", c: Conf{tokenFile: zero}, nodes: 2, err: "is a link"},
		{name: "a megabyte", c: Conf{tokenFile: huge}, nodes: 2, err: "under 4096 bytes"},
		{name: "missing file, not the host", c: Conf{tokenFile: filepath.Join(dir, "none"), connect: 10 * time.Millisecond}, nodes: 2, err: "still missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := jobTokenOf(ctx, tt.c, tt.embedded, tt.host, tt.nodes, log)
			switch {
			case tt.err != "":
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("jobToken = %q, %v; want an error naming %q", tok, err, tt.err)
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
		made, err := jobTokenOf(ctx, Conf{tokenFile: path}, true, true, 2, log)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("token file %v, %v; want mode 0600", st, err)
		}
		read, err := jobTokenOf(ctx, Conf{tokenFile: path}, true, false, 2, log)
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
				got[i], errs[i] = jobTokenOf(ctx, Conf{tokenFile: path, connect: 10 * time.Second}, true, i%2 == 0, 2, log)
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
	_, _, _, err := jobToken(context.Background(), Conf{tokenFile: path}, jobSpec{embedded: true, maxNodes: 2}, false, logrus.New())
	if err == nil || !strings.Contains(err.Error(), "belongs to user "+proctest.OtherUserName) {
		t.Errorf("jobToken with another user's token file: %v; want a refusal naming %s", err, proctest.OtherUserName)
	}
}
