package launcher

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun-dev/gorun/internal/secret"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/rendezvous"
)

// secretRound is a Local rendezvous whose rounds carry a job secret, as
// the etcd rendezvous's do.
type secretRound struct {
	*rendezvous.Local
	secret string
}

func (r secretRound) Next(ctx context.Context, n rendezvous.Node) (rendezvous.Round, error) {
	round, err := r.Local.Next(ctx, n)
	round.JobSecret = rendezvous.Token(r.secret)
	return round, err
}

// TestAgentJobSecret: every worker of every attempt gets the same
// secret; the rendezvous's wins over gorun's own; the user's is ignored.
func TestAgentJobSecret(t *testing.T) {
	t.Parallel()
	const fromRound = "feedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedface"
	for _, tt := range []struct {
		name      string
		rdzv      string // the round's secret
		userValue bool
	}{
		{"gorun's own", "", false},
		{"the rendezvous's", fromRound, false},
		{"the user's is ignored", "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, _, stderr := shellConfig(t, 2, `echo "$GORUN_JOB_SECRET" > "$DIR/secret.$TORCHELASTIC_RESTART_COUNT.$RANK"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then
  while [ ! -s "$DIR/secret.0.0" ]; do sleep 0.01; done; exit 3
fi`)
			cfg.MaxRestarts = 1
			if tt.userValue {
				cfg.Environ = append(cfg.Environ, workerenv.JobSecret+"=mine")
			}
			local := rendezvous.NewLocal(rendezvous.LocalConfig{RunID: "test", MaxRestarts: 1})
			a, err := NewAgent(cfg, secretRound{local, tt.rdzv}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res, err := a.Run(context.Background()); err != nil || res.ExitCode != 0 {
				t.Fatalf("Run = %+v, %v\n%s", res, err, stderr)
			}
			var seen []string
			for _, f := range []string{"secret.0.0", "secret.0.1", "secret.1.0", "secret.1.1"} {
				b, err := os.ReadFile(filepath.Join(dirOf(cfg), f))
				if err != nil {
					t.Fatal(err)
				}
				seen = append(seen, strings.TrimSpace(string(b)))
			}
			want := a.cfg.JobSecret.Reveal()
			if tt.rdzv != "" {
				want = tt.rdzv
			}
			for i, s := range seen {
				if s != want || len(s) != 64 {
					t.Errorf("worker %d got %q; want %q", i, s, want)
				}
			}
			if strings.Contains(stderr.String(), want) {
				t.Errorf("the secret is in gorun's output:\n%s", stderr)
			}
			if got := strings.Contains(stderr.String(), workerenv.JobSecret+" in gorun's environment is ignored"); got != tt.userValue {
				t.Errorf("warning about the user's secret: %v, want %v\n%s", got, tt.userValue, stderr)
			}
		})
	}
}

func TestDryRunHidesSecret(t *testing.T) {
	cfg := Config{NprocPerNode: 2, Role: "default", RunID: "j", JobSecret: secret.Secret(strings.Repeat("ab", 32)),
		Entrypoint: Entrypoint{Script: "train.py", Python: []string{"python3"}}}
	round := rendezvous.Round{RunID: "j", GroupWorldSize: 1, WorldSize: 2, RoleWorldSize: 2,
		MasterAddr: "127.0.0.1", JobSecret: rendezvous.Token(strings.Repeat("cd", 32))}
	dry, err := NewDryRun(&cfg, round, false, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"text", "json"} {
		var out bytes.Buffer
		if err := dry.Write(&out, format); err != nil {
			t.Fatal(err)
		}
		if s := out.String(); strings.Contains(s, "abab") || strings.Contains(s, "cdcd") || !strings.Contains(s, SecretPlaceholder) {
			t.Errorf("%s: want %s in place of the secret:\n%s", format, SecretPlaceholder, s)
		}
	}
	for _, w := range dry.Workers {
		for _, kv := range w.Env {
			if strings.HasPrefix(kv, workerenv.JobSecret+"=") && kv != workerenv.JobSecret+"="+SecretPlaceholder {
				t.Errorf("worker env holds %s", kv)
			}
		}
	}
}
