package launcher

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"
	"github.com/gorun-dev/gorun/rendezvous"
)

// shellConfig returns a Config whose workers run script with /bin/sh, in
// dir (exported to the script as $DIR).
func shellConfig(t *testing.T, nproc int, script string) (Config, *proctest.Buffer, *proctest.Buffer) {
	t.Helper()
	dir := t.TempDir()
	stdout, stderr := &proctest.Buffer{}, &proctest.Buffer{}
	log := logrus.New()
	log.SetOutput(stderr)
	cfg := NewConfig()
	cfg.Entrypoint = Entrypoint{Script: "/bin/sh", NoPython: true, Args: []string{"-c", script}}
	cfg.NprocPerNode = nproc
	cfg.Environ = append(os.Environ(), "DIR="+dir)
	cfg.Stdout, cfg.Stderr, cfg.Log = stdout, stderr, log
	cfg.StopTimeout = 5 * time.Second
	return cfg, stdout, stderr
}

func runAgent(t *testing.T, cfg Config, signals <-chan os.Signal) (Result, error) {
	t.Helper()
	a, err := NewAgent(cfg, rendezvous.NewLocal(rendezvous.LocalConfig{RunID: "test", MaxRestarts: cfg.MaxRestarts}), signals)
	if err != nil {
		t.Fatal(err)
	}
	return a.Run(context.Background())
}

// dirOf returns the $DIR of cfg.
func dirOf(cfg Config) string {
	v, _ := lookupEnv(cfg.Environ, "DIR")
	return v
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	proctest.WaitFor(t, what, 20*time.Second, cond)
}

func TestAgentRestartsWithCount(t *testing.T) {
	t.Parallel()
	cfg, stdout, _ := shellConfig(t, 3, `echo "rank=$RANK restart=$TORCHELASTIC_RESTART_COUNT world=$WORLD_SIZE"
if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt 2 ]; then exit 7; fi`)
	cfg.MaxRestarts = 3
	res, err := runAgent(t, cfg, nil)
	if err != nil || res.ExitCode != 0 || res.Restarts != 2 {
		t.Fatalf("Run = %+v, %v; want exit 0 after 2 restarts", res, err)
	}
	out := stdout.String()
	for _, want := range []string{"[default1]:rank=1 restart=0 world=3", "[default1]:rank=1 restart=1 world=3", "[default2]:rank=2 restart=2 world=3"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
}

func TestAgentOutOfRestarts(t *testing.T) {
	t.Parallel()
	cfg, _, stderr := shellConfig(t, 2, `[ "$RANK" = 1 ] && exit 5; exec sleep 30`)
	cfg.MaxRestarts = 1
	res, err := runAgent(t, cfg, nil)
	if err != nil || res.ExitCode != 5 || res.Restarts != 1 {
		t.Fatalf("Run = %+v, %v; want exit 5 after 1 restart", res, err)
	}
	if len(res.Failures) != 1 || res.Failures[0].Rank != 1 {
		t.Fatalf("failures = %+v; want rank 1 only (rank 0 was stopped by gorun, not failed)", res.Failures)
	}
	for _, want := range []string{"FAILED", "rank      : 1 (local_rank: 1)", "exitcode  : 5", "no restarts left"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestAgentNoRestartExitCodes(t *testing.T) {
	t.Parallel()
	cfg, stdout, stderr := shellConfig(t, 2, `echo "attempt $TORCHELASTIC_RESTART_COUNT"; [ "$RANK" = 0 ] && exit 3; exit 0`)
	cfg.MaxRestarts = 5
	cfg.NoRestartExitCodes = []int{2, 3}
	res, err := runAgent(t, cfg, nil)
	if err != nil || res.ExitCode != 3 || res.Restarts != 0 {
		t.Fatalf("Run = %+v, %v; want exit 3 without a restart", res, err)
	}
	if strings.Contains(stdout.String(), "attempt 1") || !strings.Contains(stderr.String(), "--no-restart-on-exit-codes") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
}

func TestAgentSignalExitCode(t *testing.T) {
	t.Parallel()
	cfg, _, _ := shellConfig(t, 1, `kill -KILL $$`)
	res, _ := runAgent(t, cfg, nil)
	if res.ExitCode != 137 || len(res.Failures) != 1 || res.Failures[0].Signal != syscall.SIGKILL {
		t.Fatalf("Run = %+v; want exit 137 with a SIGKILL failure", res)
	}
}

// TestAgentReportsAKillItDidNotSend: rank 1 fails first; rank 2 dies of a
// SIGKILL that gorun's stop did not send (here it kills itself when the
// stop's SIGTERM comes, as a worker killed from outside while the stop
// began would be seen). Rank 2 is a failure too; rank 0, ended by the
// stop's SIGTERM, is not.
func TestAgentReportsAKillItDidNotSend(t *testing.T) {
	t.Parallel()
	cfg, _, stderr := shellConfig(t, 3, `case $RANK in
1) while [ ! -e "$DIR/ready.0" ] || [ ! -e "$DIR/ready.2" ]; do sleep 0.01; done; exit 4;;
2) trap 'kill -KILL $$' TERM; touch "$DIR/ready.2"; while :; do sleep 0.05; done;;
*) touch "$DIR/ready.0"; exec sleep 30;;
esac`)
	res, err := runAgent(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ranks := map[int]syscall.Signal{}
	for _, f := range res.Failures {
		ranks[f.Rank] = f.Signal
	}
	if len(ranks) != 2 || ranks[2] != syscall.SIGKILL || res.Failures[0].Rank != 1 {
		t.Fatalf("failures %+v; want rank 1 (root cause, exit 4) and rank 2 (SIGKILL), not rank 0\n%s", res.Failures, stderr)
	}
}

// readyScript traps the signals a test sends, records them in $DIR, and
// reports readiness (its pid) once the traps are in place.
const readyScript = `trap 'echo USR1 >> $DIR/got.$RANK' USR1
trap 'echo TERM >> $DIR/got.$RANK; exit 0' TERM
echo $$ > $DIR/ready.$RANK
while :; do sleep 0.05 & wait $!; done`

// TestAgentForwardsSignals: SIGUSR1 is forwarded; SIGTERM reaches the
// workers too. With preemption on (the default) it is a stop request, and
// workers that then exit 0 make the run preempted (exit 75); with
// --preempt-grace=0 it stops them, exit 143.
func TestAgentForwardsSignals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		grace     time.Duration
		code      int
		preempted bool
	}{
		{"preemption", DefaultPreemptGrace, ExitPreempted, true},
		{"no preemption", 0, 128 + int(syscall.SIGTERM), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, _, _ := shellConfig(t, 2, readyScript)
			cfg.PreemptGrace = tt.grace
			dir := dirOf(cfg)
			sigs := make(chan os.Signal, 2)
			done := make(chan Result, 1)
			go func() {
				res, _ := runAgent(t, cfg, sigs)
				done <- res
			}()
			waitFor(t, "workers ready", func() bool { return len(proctest.PIDs(t, filepath.Join(dir, "ready.*"))) == 2 })
			sigs <- syscall.SIGUSR1
			waitFor(t, "SIGUSR1 forwarded", func() bool {
				a, _ := os.ReadFile(filepath.Join(dir, "got.0"))
				b, _ := os.ReadFile(filepath.Join(dir, "got.1"))
				return strings.Contains(string(a), "USR1") && strings.Contains(string(b), "USR1")
			})
			sigs <- syscall.SIGTERM
			res := <-done
			if res.ExitCode != tt.code || res.Preempted != tt.preempted {
				t.Fatalf("Run = %+v; want exit %d for SIGTERM", res, tt.code)
			}
			for r := range 2 {
				got, _ := os.ReadFile(filepath.Join(dir, "got."+strconv.Itoa(r)))
				if !strings.Contains(string(got), "TERM") {
					t.Errorf("rank %d did not get SIGTERM: %q", r, got)
				}
			}
		})
	}
}

func TestAgentStopTimeoutKills(t *testing.T) {
	t.Parallel()
	cfg, _, stderr := shellConfig(t, 2, `trap '' TERM INT; echo $$ > $DIR/ready.$RANK; while :; do sleep 0.05; done`)
	cfg.StopTimeout = 100 * time.Millisecond
	dir := dirOf(cfg)
	sigs := make(chan os.Signal, 1)
	done := make(chan Result, 1)
	go func() {
		res, _ := runAgent(t, cfg, sigs)
		done <- res
	}()
	waitFor(t, "workers ready", func() bool { return len(proctest.PIDs(t, filepath.Join(dir, "ready.*"))) == 2 })
	sigs <- syscall.SIGINT
	res := <-done
	if res.ExitCode != 130 {
		t.Fatalf("Run = %+v; want exit 130 for SIGINT", res)
	}
	if !strings.Contains(stderr.String(), "sending SIGKILL") {
		t.Errorf("stderr lacks the SIGKILL escalation:\n%s", stderr)
	}
	for _, pid := range proctest.PIDs(t, filepath.Join(dir, "ready.*")) {
		if !proctest.Gone(pid) {
			t.Errorf("worker %d still running", pid)
		}
	}
}

// TestAgentSecondSignalKillsAtOnce: a second stop signal kills at once.
// With preemption on, the first SIGTERM is the stop request, the second
// the stop, the third the kill.
func TestAgentSecondSignalKillsAtOnce(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		grace time.Duration
		sends int
	}{{0, 2}, {DefaultPreemptGrace, 3}} {
		cfg, _, _ := shellConfig(t, 1, `trap '' TERM; echo $$ > $DIR/ready.$RANK; while :; do sleep 0.05; done`)
		cfg.StopTimeout = time.Hour
		cfg.PreemptGrace = tt.grace
		cfg.signalRepeatWindow = time.Nanosecond // each signal is a new one
		dir := dirOf(cfg)
		sigs := make(chan os.Signal, 3)
		done := make(chan Result, 1)
		go func() {
			res, _ := runAgent(t, cfg, sigs)
			done <- res
		}()
		waitFor(t, "worker ready", func() bool { return len(proctest.PIDs(t, filepath.Join(dir, "ready.*"))) == 1 })
		for range tt.sends {
			sigs <- syscall.SIGTERM
		}
		if res := <-done; res.ExitCode != 143 {
			t.Fatalf("grace %v: Run = %+v; want exit 143", tt.grace, res)
		}
	}
}

// TestAgentLeavesNoDescendants checks that the workers' children are gone
// when Run returns, whether the workers failed, succeeded or were stopped.
func TestAgentLeavesNoDescendants(t *testing.T) {
	t.Parallel()
	spawn := `sleep 300 & echo $! >> $DIR/child.$RANK; (sleep 300 & echo $! >> $DIR/child.$RANK; wait) &
while [ "$(wc -l < $DIR/child.$RANK)" -lt 2 ]; do sleep 0.01; done
touch $DIR/ready.$RANK
`
	tests := map[string]string{
		"failure": spawn + `if [ "$RANK" = 1 ]; then while [ ! -e $DIR/ready.0 ]; do sleep 0.01; done; exit 1; fi; wait`,
		"success": spawn + `exit 0`,
	}
	for name, script := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, _, _ := shellConfig(t, 2, script)
			dir := dirOf(cfg)
			if _, err := runAgent(t, cfg, nil); err != nil {
				t.Fatal(err)
			}
			pids := proctest.PIDs(t, filepath.Join(dir, "child.*"))
			if len(pids) != 4 {
				t.Fatalf("got %d grandchildren pids; want 4", len(pids))
			}
			proctest.WaitGone(t, "grandchildren gone", 20*time.Second, pids)
		})
	}
}

func TestAgentLogDirLayout(t *testing.T) {
	t.Parallel()
	cfg, stdout, stderr := shellConfig(t, 2, `echo "out $RANK"; echo "err $RANK" >&2
echo "{\"message\": \"failed on purpose\", \"timestamp\": 1700000000}" > "$TORCHELASTIC_ERROR_FILE"
touch "$DIR/printed.$TORCHELASTIC_RESTART_COUNT.$RANK"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then
  while [ ! -e "$DIR/printed.0.0" ]; do sleep 0.01; done; exit 4
fi`)
	logDir := t.TempDir()
	cfg.LogDir = logDir
	cfg.RunID = "job7"
	cfg.MaxRestarts = 1
	cfg.Redirects = StdSpec{Default: StdErr}
	cfg.Tee = StdSpec{PerRank: map[int]Std{0: StdOut}}
	res, err := runAgent(t, cfg, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	runs, _ := filepath.Glob(filepath.Join(logDir, "job7_*"))
	if len(runs) != 1 {
		t.Fatalf("run folders %v; want one job7_<random>, as torchrun names it", runs)
	}
	run := runs[0]
	for _, f := range []struct{ path, want string }{
		{"attempt_0/0/stdout.log", "out 0\n"},
		{"attempt_0/0/stderr.log", "err 0\n"},
		{"attempt_0/1/stderr.log", "err 1\n"},
		{"attempt_0/1/error.json", "failed on purpose"},
		{"attempt_1/1/stderr.log", "err 1\n"},
	} {
		data, err := os.ReadFile(filepath.Join(run, f.path))
		if err != nil || !strings.Contains(string(data), f.want) {
			t.Errorf("%s = %q, %v; want %q", f.path, data, err, f.want)
		}
	}
	if _, err := os.Stat(filepath.Join(run, "attempt_0/1/stdout.log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rank 1 stdout was neither redirected nor teed, but has a file: %v", err)
	}
	// Rank 0's stdout is teed (console and file); stderr is redirected
	// (file only); rank 1's stdout is on the console only.
	if out := stdout.String(); !strings.Contains(out, "[default0]:out 0") || !strings.Contains(out, "[default1]:out 1") {
		t.Errorf("stdout:\n%s", out)
	}
	if strings.Contains(stderr.String(), "err 0") {
		t.Errorf("redirected stderr reached the console:\n%s", stderr)
	}
	// A second run with the same id keeps the first run's files.
	if _, err := runAgent(t, cfg, nil); err != nil {
		t.Fatal(err)
	}
	runs, _ = filepath.Glob(filepath.Join(logDir, "job7_*", "attempt_0", "0", "stdout.log"))
	if len(runs) != 2 {
		t.Errorf("after a second run: %v; want both runs' logs", runs)
	}
}

// TestAgentTeeWithoutLogDir: --tee and --redirects without --log-dir
// write to a new temporary folder, kept and named in the log, as
// torchrun's torchelastic_* (torchtitan's run_train.sh gives --tee 3 and
// no --log-dir).
func TestAgentTeeWithoutLogDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	cfg, stdout, stderr := shellConfig(t, 1, `echo "out $RANK"`)
	cfg.RunID = "tee"
	cfg.Tee = StdSpec{Default: StdOut | StdErr}
	if res, err := runAgent(t, cfg, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	logs, _ := filepath.Glob(filepath.Join(tmp, logsTempPrefix+"*", "tee_*", "attempt_0", "0", "stdout.log"))
	if len(logs) != 1 {
		t.Fatalf("logs %v; want one stdout.log in %s/%s*/tee_*/attempt_0/0", logs, tmp, logsTempPrefix)
	}
	if b, _ := os.ReadFile(logs[0]); string(b) != "out 0\n" {
		t.Errorf("%s = %q", logs[0], b)
	}
	if run := filepath.Dir(filepath.Dir(filepath.Dir(logs[0]))); !strings.Contains(stderr.String(), "worker logs in "+run) {
		t.Errorf("gorun does not say where the logs are (%s):\n%s", run, stderr)
	}
	if !strings.Contains(stdout.String(), "out 0") {
		t.Errorf("teed output missing on the console:\n%s", stdout)
	}
}

func TestAgentLocalRanksFilterAndNoPrefix(t *testing.T) {
	t.Parallel()
	cfg, stdout, _ := shellConfig(t, 3, `echo "line from $RANK"`)
	cfg.LocalRanksFilter = []int{0, 2}
	cfg.NoPrefix = true
	if res, err := runAgent(t, cfg, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	out := stdout.String()
	if !strings.Contains(out, "line from 0\n") || !strings.Contains(out, "line from 2\n") || strings.Contains(out, "line from 1") || strings.Contains(out, "[") {
		t.Errorf("stdout:\n%s", out)
	}
}

func TestAgentErrorFileRemovedWithoutLogDir(t *testing.T) {
	t.Parallel()
	cfg, _, stderr := shellConfig(t, 1, `echo "$TORCHELASTIC_ERROR_FILE" > $DIR/path
printf '%s' '{"message": {"message": "ValueError: bad", "extraInfo": {"py_callstack": "Traceback\nValueError: bad\n", "timestamp": "1"}}}' > "$TORCHELASTIC_ERROR_FILE"; exit 1`)
	res, err := runAgent(t, cfg, nil)
	if err != nil || res.ExitCode != 1 || res.Failures[0].Error == nil || res.Failures[0].Error.Message != "ValueError: bad" {
		t.Fatalf("Run = %+v, %v; want the error file's message", res, err)
	}
	if !strings.Contains(stderr.String(), "message   : ValueError: bad") {
		t.Errorf("summary lacks the message:\n%s", stderr)
	}
	path, _ := os.ReadFile(filepath.Join(dirOf(cfg), "path"))
	tmp := filepath.Dir(filepath.Dir(filepath.Dir(strings.TrimSpace(string(path)))))
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory %s left behind: %v", tmp, err)
	}
}

// TestAgentListsAFailureCutShort: a worker that wrote its error file and
// was then stopped because another worker failed first failed too: the
// summary lists it under the other failures (it said
// <NO_OTHER_FAILURES>); a worker stopped without one is not listed.
func TestAgentListsAFailureCutShort(t *testing.T) {
	t.Parallel()
	cfg, _, stderr := shellConfig(t, 3, `case $RANK in
2) printf '%s' '{"message": {"message": "ValueError: boom from rank 2", "extraInfo": {"py_callstack": "", "timestamp": "1"}}}' > "$TORCHELASTIC_ERROR_FILE"
   touch "$DIR/wrote"; exec sleep 60 ;;
1) while [ ! -e "$DIR/wrote" ]; do sleep 0.01; done; exit 1 ;;
*) exec sleep 60 ;;
esac`)
	res, err := runAgent(t, cfg, nil)
	if err != nil || res.ExitCode != 1 {
		t.Fatalf("Run = %+v, %v; want exit 1", res, err)
	}
	var ranks []int
	for _, f := range res.Failures {
		ranks = append(ranks, f.Rank)
	}
	if !slices.Equal(ranks, []int{1, 2}) {
		t.Errorf("failures of ranks %v; want 1 (the root cause), then 2", ranks)
	}
	if s := stderr.String(); strings.Contains(s, "<NO_OTHER_FAILURES>") || !strings.Contains(s, "message   : ValueError: boom from rank 2") {
		t.Errorf("the summary does not list rank 2's failure:\n%s", s)
	}
}

func TestAgentStartError(t *testing.T) {
	t.Parallel()
	cfg, _, _ := shellConfig(t, 2, "")
	cfg.Entrypoint = Entrypoint{Script: filepath.Join(t.TempDir(), "missing"), NoPython: true}
	res, err := runAgent(t, cfg, nil)
	var se *StartError
	if !errors.As(err, &se) || res.ExitCode != 127 {
		t.Fatalf("Run = %+v, %v; want a StartError and exit 127", res, err)
	}
}

// TestAgentBackoffInterruptedBySignal: SIGTERM during the restart
// backoff ends the run at once: preempted (no worker runs, nothing to
// save), or 143 without preemption.
func TestAgentBackoffInterruptedBySignal(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		grace time.Duration
		code  int
	}{{DefaultPreemptGrace, ExitPreempted}, {0, 143}} {
		cfg, _, stderr := shellConfig(t, 1, `echo x > $DIR/ran; exit 1`)
		cfg.MaxRestarts = 1
		cfg.RestartBackoff = time.Hour
		cfg.RestartBackoffMax = time.Hour
		cfg.PreemptGrace = tt.grace
		sigs := make(chan os.Signal, 1)
		done := make(chan Result, 1)
		go func() {
			res, _ := runAgent(t, cfg, sigs)
			done <- res
		}()
		// In the backoff, not while the failing worker still runs (a stop
		// request then makes its failure final: exit 1).
		waitFor(t, "the backoff", func() bool { return strings.Contains(stderr.String(), "before restarting") })
		sigs <- syscall.SIGTERM
		if res := <-done; res.ExitCode != tt.code {
			t.Fatalf("grace %v: Run = %+v; want exit %d during the backoff", tt.grace, res, tt.code)
		}
	}
}

// lostStore is a rendezvous whose store is gone when a failure is
// reported.
type lostStore struct{ *rendezvous.Local }

func (lostStore) Fail(context.Context, rendezvous.Round, string, int, bool) (bool, error) {
	return false, errors.New("etcd at n0:29400 did not answer within 60s")
}

// TestFailureWithoutTheStoreSaysSo: a failure the store cannot record
// ends the job saying so, not "no restarts left" with restarts left.
func TestFailureWithoutTheStoreSaysSo(t *testing.T) {
	t.Parallel()
	cfg, _, stderr := shellConfig(t, 1, `exit 3`)
	cfg.MaxRestarts = 3
	a, err := NewAgent(cfg, lostStore{rendezvous.NewLocal(rendezvous.LocalConfig{RunID: "test", MaxRestarts: 3})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := a.Run(context.Background())
	if res.ExitCode != 3 || !strings.Contains(stderr.String(), "the job's store could not record the failure") || strings.Contains(stderr.String(), "no restarts left") {
		t.Errorf("Run = %+v\n%s", res, stderr)
	}
}
