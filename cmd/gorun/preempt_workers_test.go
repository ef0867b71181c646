package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/internal/testkit/timing"
)

// The worker side of coordinated preemption, end to end with gorun: the
// job is asked to stop through GORUN_STOP_FILE or GORUN_STOP_SIGNAL (set
// here in gorun's environment, which the workers inherit), every rank
// stops after the same step, the checkpoint is saved and the workers exit
// 0; a second run resumes from it and ends exactly as an uninterrupted run.

func TestPreemptDDPWorkers(t *testing.T) {
	t.Parallel()
	testPreemptWorkers(t, preemptWorkers{
		argv: func(extra ...string) []string {
			return append([]string{"--no-python", ddpBin, "--steps", "30"}, extra...)
		},
		stepTime: "100ms",
		started:  "[default0]:step 3 loss=",
		stepLine: "[default0]:step ",
		files:    []string{"ddp.ckpt"},
	})
}

func TestPreemptTorchWorkers(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	testPreemptWorkers(t, preemptWorkers{
		argv: func(extra ...string) []string {
			return append([]string{"--python", py, ddpExample, "--steps", "30"}, extra...)
		},
		stepTime: "0.2",
		started:  "[default0]:step 3 loss ",
		stepLine: "[default0]:step ",
		files:    []string{"ckpt-rank0.pt", "ckpt-rank1.pt"},
	})
}

// preemptWorkers is one training program under test.
type preemptWorkers struct {
	argv     func(extra ...string) []string // the command line after gorun's flags
	stepTime string                         // --step-time: slow enough to interrupt
	started  string                         // output once a few steps are done
	stepLine string                         // prefix of rank 0's per-step lines
	files    []string                       // the checkpoint's files in its directory
}

func testPreemptWorkers(t *testing.T, w preemptWorkers) {
	const nproc = "--nproc-per-node=2"
	// The uninterrupted run, at the same time as the others.
	refDone := make(chan result, 1)
	go func() {
		r, err := execGorunDiagnosed(testEnv("PYTHONFAULTHANDLER=1"), append([]string{nproc}, w.argv()...)...)
		if err == nil && torchExitAbort(r) {
			// PyTorch 2.15's abort at exit (torchExitAbort): once more.
			r, err = execGorunDiagnosed(testEnv("PYTHONFAULTHANDLER=1"), append([]string{nproc}, w.argv()...)...)
		}
		if err != nil {
			r = result{stderr: err.Error(), code: -1}
		}
		refDone <- r
	}()
	ref := sync.OnceValue(func() result { return <-refDone })
	t.Cleanup(func() { ref() }) // never leave the run behind
	refFinal := func(t *testing.T) string {
		t.Helper()
		r := ref()
		line := finalLine(r.stdout)
		if r.code != 0 || line == "" {
			t.Fatalf("uninterrupted run: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		return line
	}
	// Sequential: they share the reference run and the 2 CPUs of small CI machines.
	for _, how := range []string{"stop file", "SIGTERM to rank 1"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			ckpt, stopFile := filepath.Join(dir, "ckpt"), filepath.Join(dir, "stop")
			env := testEnv(comm.StopFileEnv+"="+stopFile, comm.StopSignalEnv+"=TERM")
			cmd, stdout, stderr := startGorun(t, env, append([]string{nproc}, w.argv("--checkpoint", ckpt, "--step-time", w.stepTime)...)...)
			waitForTorch(t, "a few steps", func() bool { return strings.Contains(stdout.String(), w.started) })
			// The path the workers got: gorun's own.
			_, wenv := worker(t, cmd.Process.Pid, ckpt, 0)
			if stopFile = wenv[comm.StopFileEnv]; stopFile == "" {
				t.Fatalf("the worker has no %s", comm.StopFileEnv)
			}
			rank1 := 0
			if how != "stop file" {
				// Found before the file is written: once it exists, rank 1
				// may stop on it at its next step.
				rank1, _ = worker(t, cmd.Process.Pid, ckpt, 1)
			}
			// The file first, as gorun does: a signal without it is a
			// plain stop, not a stop request.
			if err := os.WriteFile(stopFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if rank1 != 0 {
				switch err := syscall.Kill(rank1, syscall.SIGTERM); {
				case errors.Is(err, syscall.ESRCH):
					t.Logf("rank 1 (pid %d) had already stopped on the file", rank1)
				case err != nil:
					t.Fatalf("SIGTERM to rank 1 (pid %d): %v", rank1, err)
				}
			}
			// Every worker saves and exits 0, but gorun was not asked to
			// stop: a stop file it did not create never makes a success.
			if code := waitExit(t, cmd); code != 1 || !strings.Contains(stderr.String(), "no stop was requested") {
				t.Fatalf("gorun exit %d; want 1, naming the stop file it did not create\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			out := stdout.String()
			next := stopStep(t, out)
			t.Logf("every rank stopped before step %d", next)
			if want := "[default0]:preempted: saved step " + strconv.Itoa(next) + " to " + ckpt + "\n"; !strings.Contains(out, want) {
				t.Errorf("stdout lacks %q:\n%s", want, out)
			}
			if strings.Contains(out, "final loss=") {
				t.Errorf("the stopped run finished:\n%s", out)
			}
			for _, f := range w.files {
				if _, err := os.Stat(filepath.Join(ckpt, f)); err != nil {
					t.Errorf("checkpoint: %v", err)
				}
			}

			// The same job again, not asked to stop: it resumes where the
			// first stopped and ends as the uninterrupted run did.
			env = testEnv(comm.StopFileEnv+"="+filepath.Join(dir, "stop-2"), comm.StopSignalEnv+"=TERM")
			r := runGorun(t, env, append([]string{nproc}, w.argv("--checkpoint", ckpt)...)...)
			if r.code != 0 {
				t.Fatalf("resumed run: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if want := "[default0]:resumed at step " + strconv.Itoa(next) + "\n"; !strings.Contains(r.stdout, want) {
				t.Errorf("resumed run lacks %q:\n%s", want, r.stdout)
			}
			if steps := linesWithPrefix(r.stdout, w.stepLine); len(steps) == 0 || !strings.HasPrefix(steps[0], strconv.Itoa(next)+" ") {
				t.Errorf("resumed run's first step %q; want step %d", steps, next)
			}
			if got, want := finalLine(r.stdout), refFinal(t); got != want {
				t.Errorf("resumed run ends %q; the uninterrupted run %q", got, want)
			}
		})
	}
}

// stopStep checks that both ranks stopped, each once and at the same
// step, after the step the test waited for and before the end, and
// returns it (the next step to run).
func stopStep(t *testing.T, out string) int {
	t.Helper()
	next := preemptStopStep(t, out, 2, 3)
	if next >= 30 {
		t.Fatalf("stopped at step %d; want one before the end, 30", next)
	}
	return next
}

// finalLine is rank 0's "final loss=... checksum=... world=..." line.
func finalLine(out string) string {
	lines := linesWithPrefix(out, "[default0]:final loss=")
	if len(lines) != 1 {
		return ""
	}
	return "final loss=" + lines[0]
}

// worker finds the worker of rank among gorun's processes (a process
// other than gorun whose command line holds marker and whose environment
// has RANK=rank) and returns its pid and environment.
func worker(t *testing.T, gorun int, marker string, rank int) (int, map[string]string) {
	t.Helper()
	var pid int
	env := map[string]string{}
	waitFor(t, "the worker of rank "+strconv.Itoa(rank), func() bool {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			p, err := strconv.Atoi(e.Name())
			if err != nil || p == gorun {
				continue
			}
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if !strings.Contains(string(cmdline), marker) {
				continue
			}
			environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			vars := strings.Split(string(environ), "\x00")
			if slices.Contains(vars, "RANK="+strconv.Itoa(rank)) {
				for _, kv := range vars {
					if k, v, ok := strings.Cut(kv, "="); ok {
						env[k] = v
					}
				}
				pid = p
				return true
			}
		}
		return false
	})
	return pid, env
}

// execGorunDiagnosed is execGorun for a run that should end on its own
// (the uninterrupted reference run): past 90 s it records the process
// tree and makes gorun and its workers print their stacks (SIGABRT: Go's
// dump, Python's faulthandler) before the kill, into stderr. (Once, in a
// full suite, this run never exited after its last line; this is how to
// see where it hangs, should it again.)
func execGorunDiagnosed(env []string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gorunBin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	// What ps shows of a hang, added to stderr once gorun has exited (the
	// command's own copier writes stderr until then).
	var diag strings.Builder
	select {
	case err = <-exited:
	case <-time.After(90 * time.Second):
		tree, _ := exec.Command("ps", "-eo", "pid,ppid,stat,wchan:32,args", "--forest").Output()
		for _, line := range strings.Split(string(tree), "\n") {
			if strings.Contains(line, strconv.Itoa(cmd.Process.Pid)) || strings.Contains(line, "train_ddp") || strings.Contains(line, "ddp --steps") {
				diag.WriteString("ps: " + line + "\n")
			}
		}
		out, _ := exec.Command("pgrep", "-P", strconv.Itoa(cmd.Process.Pid)).Output()
		for _, f := range strings.Fields(string(out)) {
			if pid, perr := strconv.Atoi(f); perr == nil {
				_ = syscall.Kill(pid, syscall.SIGABRT)
			}
		}
		_ = cmd.Process.Signal(syscall.SIGABRT)
		err = <-exited
	}
	stderr.WriteString(diag.String())
	return runResult(err, &stdout, &stderr)
}

// TestPreemptWhileTorchImports: a stop request while the ranks still
// import torch (a scheduler's signal may come at any time; Slurm's did in
// a probe) ends with a checkpoint and exit 75, not with ranks killed by
// gorun's SIGTERM (143): gorun_preempt's import, before torch's, catches
// the signal and keeps it for the first check. The stop comes, through
// testdata/stop_at_torch_import.py, when every rank starts to import
// torch.
func TestPreemptWhileTorchImports(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	hook, _ := filepath.Abs("testdata/stop_at_torch_import.py")
	// The grace covers the rest of the import, the meeting and the first
	// step on a busy machine.
	r := runGorun(t, testEnv(), "--nproc-per-node=2", "--preempt-grace", timing.TorchImport(t).String(), "--python", py, hook, ddpExample,
		"--steps", "1000", "--step-time", "0.05", "--checkpoint", ckpt)
	if r.code != preemptExit || !strings.Contains(r.stdout, "[default0]:preempted: saved step ") {
		t.Fatalf("gorun exit %d; want %d and a checkpoint\nstdout:\n%s\nstderr:\n%s", r.code, preemptExit, r.stdout, r.stderr)
	}
}
