package main

import (
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// secretScript records the worker's job secret per attempt and rank;
// rank 1 fails in every attempt once rank 0 has recorded its secret.
const secretScript = `echo "$GORUN_JOB_SECRET" > "$1/s.$TORCHELASTIC_RESTART_COUNT.$RANK.tmp"
mv "$1/s.$TORCHELASTIC_RESTART_COUNT.$RANK.tmp" "$1/s.$TORCHELASTIC_RESTART_COUNT.$RANK"
if [ "$RANK" = 1 ]; then
  while [ ! -e "$1/s.$TORCHELASTIC_RESTART_COUNT.0" ]; do sleep 0.01; done; exit 3
fi
exec sleep 300`

// TestJobSecretReachesWorkers: every worker of every attempt gets the
// job's secret (64 hex digits), not the user's; another job gets another
// one; the secret is in no output of gorun's, failure summary included,
// and a --no-python worker is not told about PyTorch's @record.
func TestJobSecretReachesWorkers(t *testing.T) {
	t.Parallel()
	var secrets []string
	for job := range 2 {
		dir := t.TempDir()
		script := writeScript(t, secretScript)
		r := runGorun(t, testEnv("GORUN_JOB_SECRET=users-own"), "--nproc-per-node=2", "--max-restarts=1", "--no-python", script, dir)
		if r.code != 3 || !strings.Contains(r.stderr, "Root Cause") {
			t.Fatalf("job %d: exit %d; want 3 and a failure summary\n%s", job, r.code, r.stderr)
		}
		var got []string
		for a := range 2 {
			for rank := range 2 {
				b, err := os.ReadFile(filepath.Join(dir, "s."+strconv.Itoa(a)+"."+strconv.Itoa(rank)))
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, strings.TrimSpace(string(b)))
			}
		}
		s := got[0]
		if raw, err := hex.DecodeString(s); err != nil || len(raw) != 32 {
			t.Fatalf("job %d: secret %q; want 64 hex digits", job, s)
		}
		for i, g := range got {
			if g != s {
				t.Errorf("job %d: worker %d got another secret than worker 0", job, i)
			}
		}
		if strings.Contains(r.stdout+r.stderr, s) {
			t.Errorf("job %d: the secret is in gorun's output:\n%s\n%s", job, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "GORUN_JOB_SECRET in gorun's environment is ignored") {
			t.Errorf("job %d: no word that the user's GORUN_JOB_SECRET is ignored:\n%s", job, r.stderr)
		}
		if strings.Contains(r.stderr, "errors.record") || !strings.Contains(r.stderr, "$TORCHELASTIC_ERROR_FILE") {
			t.Errorf("job %d: a --no-python worker's summary:\n%s", job, r.stderr)
		}
		secrets = append(secrets, s)
	}
	if secrets[0] == secrets[1] {
		t.Error("two jobs got the same secret")
	}
}

// TestDryRunHidesJobSecret: a dry run shows <secret> in place of the job
// secret, in both formats, whatever the environment holds.
func TestDryRunHidesJobSecret(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			r := runGorun(t, testEnv("GORUN_JOB_SECRET=users-own"), "--dry-run", "--format", format, "--standalone", "--nproc-per-node=2", "train.py")
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			if strings.Contains(r.stdout, "users-own") || strings.Count(r.stdout, "<secret>") != 2 {
				t.Errorf("want <secret> once per worker, and not the user's value:\n%s", r.stdout)
			}
		})
	}
}

// TestStandaloneStoreGetsToken: the --standalone store process gets the
// workers' secret in GORUN_STORE_PASSWORD, and not on its command line.
func TestStandaloneStoreGetsToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, `echo "$GORUN_JOB_SECRET" > "$1/secret.tmp"; mv "$1/secret.tmp" "$1/secret"
while [ ! -e "$1/go" ]; do sleep 0.01; done`)
	cmd, _, stderr := startGorun(t, testEnv("TMPDIR="+dir), "--standalone", "--no-python", script, dir)
	waitFor(t, "the worker's secret", func() bool {
		_, err := os.Stat(filepath.Join(dir, "secret"))
		return err == nil
	})
	b, err := os.ReadFile(filepath.Join(dir, "secret"))
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(b))
	store := childWithArg(t, cmd.Process.Pid, "store")
	if store == 0 {
		t.Fatalf("no store process under gorun\n%s", stderr)
	}
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(store) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(store) + "/cmdline")
	if len(secret) != 64 || !strings.Contains("\x00"+string(environ), "\x00GORUN_STORE_PASSWORD="+secret+"\x00") {
		t.Errorf("the store's environment lacks GORUN_STORE_PASSWORD=<the workers' secret>")
	}
	if strings.Contains(string(cmdline), secret) {
		t.Errorf("the secret is on the store's command line: %q", cmdline)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if strings.Contains(stderr.String(), secret) {
		t.Errorf("the secret is in gorun's output:\n%s", stderr)
	}
}

// childWithArg returns a child of parent whose command line holds arg,
// or 0.
func childWithArg(t *testing.T, parent int, arg string) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		cl, _ := os.ReadFile(filepath.Join(filepath.Dir(st), "cmdline"))
		for _, a := range strings.Split(string(cl), "\x00") {
			if a == arg {
				return pid
			}
		}
	}
	return 0
}

// TestRunIDMustNameAFolder: an id that could move a path (a '/') or
// holds control characters is bad input (exit 2, naming --rdzv-id and
// what is allowed) for a run and a dry run, and nothing is made outside
// --log-dir.
func TestRunIDMustNameAFolder(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, id, says string
		args           []string
	}{
		{"run", "../../x", "anything but '/'", nil},
		{"run inner dots", "a/../../../x", "anything but '/'", nil},
		{"control character", "a\tb", "anything but '/' and control characters", nil},
		{"dry run", "../../x", "anything but '/'", []string{"--dry-run"}},
		{"static nodes", "a/../../../x", "anything but '/'", []string{"--nnodes=2", "--node-rank=1", "--master-port=1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			logDir := filepath.Join(base, "a", "b")
			args := append([]string{"--rdzv-id=" + tt.id, "--log-dir", logDir, "--tee=3"}, tt.args...)
			r := runGorun(t, testEnv("TMPDIR="+base), append(args, "--no-python", "/bin/true")...)
			if r.code != 2 || !strings.Contains(r.stderr, "--rdzv-id") || !strings.Contains(r.stderr, tt.says) {
				t.Errorf("exit %d: %s; want 2 and %q", r.code, r.stderr, tt.says)
			}
			if _, err := os.Lstat(filepath.Join(base, "x")); err == nil {
				t.Error("a folder was made outside --log-dir")
			}
		})
	}
}

// TestWorkersNeverSeeTheToken keeps docs/security.md's claim true: the
// job token, its file and the store passwords in the launcher's
// environment (exported in a batch script, mounted from a Secret) do not
// reach the workers, on one node or several; the workers get the job's
// own derived secret.
func TestWorkersNeverSeeTheToken(t *testing.T) {
	t.Parallel()
	secrets := []string{"GORUN_RDZV_TOKEN", "GORUN_RDZV_TOKEN_FILE", "GORUN_RDZV_PASSWORD", "GORUN_STORE_PASSWORD"}
	script := writeScript(t, `env > "$1/env.$RANK"`)
	for _, tt := range []struct {
		name  string
		nodes int
	}{{"one node", 1}, {"two nodes", 2}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			tokenFile := filepath.Join(dir, "token")
			if err := os.WriteFile(tokenFile, []byte(testToken), 0o600); err != nil {
				t.Fatal(err)
			}
			// A password may come in torchrun's --rdzv-conf variable too
			// (read by the flag, unused by the embedded store here).
			env := testEnv("GORUN_RDZV_TOKEN_FILE="+tokenFile, "GORUN_RDZV_PASSWORD=p4ss", "GORUN_STORE_PASSWORD=p4ss",
				"PET_RDZV_CONF=last_call_timeout=1,password=p4ss-in-conf")
			ep := fmt.Sprintf("127.0.0.1:%d", freePort(t, "127.0.0.1"))
			var cmds []*exec.Cmd
			for i := range tt.nodes {
				args := []string{"--no-python", script, dir}
				if tt.nodes > 1 {
					args = append(elasticArgs(ep, "secret", i, "--nnodes=2"), args...)
				}
				cmd, _, _ := startGorun(t, env, args...)
				cmds = append(cmds, cmd)
			}
			for i, c := range cmds {
				if code := waitExit(t, c); code != 0 {
					t.Fatalf("node %d exit %d", i, code)
				}
			}
			for rank := range tt.nodes {
				b, err := os.ReadFile(filepath.Join(dir, "env."+strconv.Itoa(rank)))
				if err != nil {
					t.Fatal(err)
				}
				for _, name := range secrets {
					if strings.Contains("\n"+string(b), "\n"+name+"=") {
						t.Errorf("rank %d sees %s", rank, name)
					}
				}
				if strings.Contains(string(b), "p4ss-in-conf") || !strings.Contains(string(b), "PET_RDZV_CONF=last_call_timeout=1\n") {
					t.Errorf("rank %d: PET_RDZV_CONF's password reached the worker, or its other settings did not", rank)
				}
				if !strings.Contains(string(b), "\nGORUN_JOB_SECRET=") {
					t.Errorf("rank %d lacks GORUN_JOB_SECRET", rank)
				}
			}
		})
	}
}

// TestWorkersCannotReadTheAgentsSecrets: a worker runs as gorun's user,
// so it could read the token and the passwords from gorun's own
// environment (/proc/<gorun>/environ), whatever gorun leaves out of the
// worker's: gorun makes itself undumpable, which leaves those files to
// root. Run as a second local account, since root reads them anyway.
func TestWorkersCannotReadTheAgentsSecrets(t *testing.T) {
	t.Parallel()
	cred := proctest.OtherUser(t)
	// A copy of gorun that the other account may run.
	dir, err := os.MkdirTemp("", "gorun-other-user-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "gorun")
	b, err := os.ReadFile(gorunBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--nproc-per-node=1", "--no-python", "sh", "-c", `tr "\0" "\n" < /proc/$PPID/environ; echo read=$?`)
	cmd.Env = append(testEnv(), "GORUN_RDZV_PASSWORD=agents-password", "PET_RDZV_CONF=password=agents-conf-password", "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gorun as %s: %v\n%s", proctest.OtherUserName, err, out)
	}
	for _, secret := range []string{testToken, "agents-password", "agents-conf-password"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("a worker read %q from its agent's environment:\n%s", secret, out)
		}
	}
	if !strings.Contains(string(out), "read=") {
		t.Errorf("the worker did not run:\n%s", out)
	}
}
