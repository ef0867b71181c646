package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gorun-dev/gorun/internal/testkit/torchpy"
)

// faultScript is an ordinary DDP training loop where only rank 0 prints;
// it knows nothing of gorun (tests/hangs/train_faults.py).
var faultScript, _ = filepath.Abs("../../tests/hangs/train_faults.py")

// TestHangAndStragglerVerdicts runs issue 29's table with an unchanged
// PyTorch script on 3 ranks: each fault gets its verdict (the rank that
// held the others up, never the order of exits), and healthy jobs whose
// ranks 1 and 2 never print are left alone.
func TestHangAndStragglerVerdicts(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	cases := []struct {
		name string
		args []string
		code int
		want []string
		not  []string
		// pytorch: what PyTorch's own analyzer must say of the same
		// dumps (torch.distributed.flight_recorder.fr_trace), about the
		// collective gorun names.
		pytorch string
	}{
		{"healthy, only rank 0 prints", []string{"--hang-timeout", "4s", "--", "--steps", "80", "--print-every", "1000"}, 0,
			nil, []string{"hang:", "straggler watch"}, ""},
		{"healthy, each batch a data loader worker's 5 s of CPU", []string{"--hang-timeout", "3s", "--", "--fault", "loader", "--delay", "5", "--steps", "3", "--fault-step", "99"}, 0,
			nil, []string{"hang:"}, ""},
		{"rank 1 sleeps before all_reduce #20", []string{"--hang-timeout", "6s", "--", "--fault", "sleep"}, 124,
			[]string{"hang:   rank 1 never entered all_reduce #", "(ranks 0, 2 wait in it)", "rank 1 is outside any collective, at " + faultScript + ":",
				"Root Cause (the rank that held the others up)", "rank      : 1 (local_rank: 1)"}, nil, "missing ranks: {1}"},
		{"desync: rank 1 broadcasts, the others all_reduce", []string{"--hang-timeout", "6s", "--", "--fault", "desync"}, 124,
			[]string{"hang:   desync at collective #", "rank 1 called broadcast", "where ranks 0, 2 called all_reduce", "rank      : 1 (local_rank: 1)"}, nil, "Culprit rank 1"},
		{"rank 1 blocked in its data loader", []string{"--hang-timeout", "6s", "--", "--fault", "dataloader"}, 124,
			[]string{"hang:   rank 1 never entered all_reduce #", "in batches", "rank      : 1 (local_rank: 1)"}, nil, "missing ranks: {1}"},
		{"rank 1 exits 0 at step 20", []string{"--", "--fault", "exit0"}, 1,
			[]string{"(rank 1 had exited 0 at", "exited 0 after 21 optimizer steps at", "error says it lost a peer: \"RuntimeError: Connection closed by peer",
				"Root Cause (the rank that left while the others ran)", "rank      : 1 (local_rank: 1)"}, nil, ""},
		{"rank 1 three times slower", []string{"--", "--fault", "slow", "--steps", "30"}, 0,
			[]string{"straggler watch: rank 1 is a straggler"}, []string{"rank 0 is a straggler", "rank 2 is a straggler"}, ""},
		{"rank 2 +0.2 s a step from step 40", []string{"--", "--fault", "slowafter", "--fault-rank", "2", "--fault-step", "40", "--steps", "70"}, 0,
			[]string{"straggler watch: rank 2 is a straggler"}, []string{"rank 0 is a straggler", "rank 1 is a straggler"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			i := 0
			for i < len(tc.args) && tc.args[i] != "--" {
				i++
			}
			logs := t.TempDir()
			args := append([]string{"--nproc-per-node=3", "--log-dir", logs, "--python", py}, tc.args[:i]...)
			args = append(append(args, faultScript), tc.args[i+1:]...)
			run := func() result { return runGorun(t, testEnv(), args...) }
			r := againIfTorchAborted(t, run(), run)
			if r.code != tc.code {
				t.Errorf("exit %d; want %d", r.code, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q", w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(r.stderr, n) {
					t.Errorf("stderr has %q", n)
				}
			}
			if tc.name == "rank 2 +0.2 s a step from step 40" {
				// Named with the step it began: 40 steps done when it first
				// came late (a little earlier if noise made it late once).
				m := regexp.MustCompile(`rank 2 is a straggler: .* its step (\d+)`).FindStringSubmatch(r.stderr)
				if m == nil {
					t.Errorf("no step in the straggler line")
				} else if n, _ := strconv.Atoi(m[1]); n < 37 || n > 41 {
					t.Errorf("the slowdown dated from step %d; it began at 40", n)
				}
			}
			if tc.pytorch != "" {
				agreesWithPyTorch(t, py, logs, r.stderr, tc.pytorch)
			}
			if t.Failed() {
				t.Logf("stderr:\n%s", r.stderr)
			}
		})
	}
}

// TestHangVerdictOnTorch1 holds the verdict where there is no flight
// recorder (Debian's PyTorch 1.13): the stacks name rank 1, outside any
// collective, while the others wait in torch.distributed or backward.
func TestHangVerdictOnTorch1(t *testing.T) {
	t.Parallel()
	old := torchpy.Oldest()
	if old.Missing != "" || old.Major() != 1 {
		if os.Getenv("GORUN_REQUIRE_TORCH") == "1" {
			t.Fatalf("Debian's PyTorch 1.13 is needed: %s", old)
		}
		t.Skipf("!!!!!!!! SKIPPED: no PyTorch 1.13: %s", old)
	}
	py := old.Python
	r := runGorun(t, testEnv(), "--nproc-per-node=3", "--hang-timeout", "6s", "--python", py, faultScript, "--fault", "sleep")
	for _, w := range []string{"rank 1 is outside any collective, at " + faultScript + ":", "ranks 0, 2 wait in torch.distributed or in backward", "rank      : 1 (local_rank: 1)"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q\n%s", w, r.stderr)
		}
	}
	if r.code != 124 {
		t.Errorf("exit %d; want 124", r.code)
	}
}

// agreesWithPyTorch runs PyTorch's flight-recorder analyzer on the dumps
// gorun's probes wrote (the PyTorch pickles, one snapshot with gorun's
// JSON) and checks that it says want of the collective gorun named.
func agreesWithPyTorch(t *testing.T, py, logs, stderr, want string) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(logs, "*", "attempt_0", "flight_recorder", "pytorch"))
	if len(dirs) != 1 {
		t.Errorf("PyTorch's dumps: %v; want one folder", dirs)
		return
	}
	out, err := exec.Command(py, "-m", "torch.distributed.flight_recorder.fr_trace", dirs[0]).CombinedOutput()
	if err != nil {
		t.Errorf("PyTorch's analyzer: %v\n%s", err, out)
		return
	}
	if !strings.Contains(string(out), want) {
		t.Errorf("PyTorch's analyzer does not say %q:\n%s", want, out)
	}
	// The same collective: gorun's "#N" is PyTorch's sequence number.
	m := regexp.MustCompile(`(?:entered all_reduce|desync at collective) #(\d+)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Errorf("no collective number in gorun's verdict")
		return
	}
	if !regexp.MustCompile(`(?:sequence number: |collective_seq_id[^0-9]*)`+m[1]+`\b`).Match(out) && !strings.Contains(string(out), "#"+m[1]) {
		t.Errorf("gorun names collective #%s; PyTorch's analyzer another:\n%s", m[1], out)
	}
}

// TestSIGUSR1DumpsPyTorchWorkers: kill -USR1 gorun, as docs/watchdog.md
// says, dumps every rank's stacks and flight recorder and the job goes
// on; PyTorch workers, which have no handler for SIGUSR1, are not sent it
// (it killed them, exit 138).
func TestSIGUSR1DumpsPyTorchWorkers(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	logs := t.TempDir()
	cmd, _, stderr := startGorun(t, testEnv(), "--nproc-per-node=3", "--log-dir", logs, "--python", py, faultScript, "--steps", "300", "--step-time", "0.03")
	ranked := func(r int) bool {
		paths, _ := filepath.Glob(filepath.Join(logs, "*", "attempt_0", strconv.Itoa(r), "probe.json"))
		if len(paths) != 1 {
			return false
		}
		b, _ := os.ReadFile(paths[0])
		return strings.Contains(string(b), `"rank": `+strconv.Itoa(r))
	}
	waitFor(t, "every rank's probe to see torch.distributed", func() bool { return ranked(0) && ranked(1) && ranked(2) })
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every rank's dump", func() bool {
		d, _ := filepath.Glob(filepath.Join(logs, "*", "attempt_0", "flight_recorder", "fr_trace_rank_*.json"))
		s, _ := filepath.Glob(filepath.Join(logs, "*", "attempt_0", "flight_recorder", "stacks_rank_*.txt"))
		return len(d) == 3 && len(s) == 3
	})
	if code := waitExit(t, cmd); code != 0 {
		t.Errorf("exit %d; want the job to finish\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "SIGUSR1: the workers' probes write their stacks and flight recorders") {
		t.Errorf("stderr does not say where the dumps went:\n%s", stderr)
	}
}
