package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/watchdog"
)

// commWorkerEnv makes the test binary a worker that runs collectives on
// the CPU backend (see commWorker).
const commWorkerEnv = "GORUN_TEST_COMM_WORKER"

// commWorker checks every reduction of all-reduce for every dtype, and
// all-gather, broadcast, all-to-all and barrier, between real processes.
func commWorker() int {
	return withWorkerEnv(30*time.Second, checkCollectives)
}

// withWorkerEnv runs fn on the worker's world group (collective timeout
// timeout), within a minute, and returns its exit code.
func withWorkerEnv(timeout time.Duration, fn func(ctx context.Context, env *comm.Env) int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env, err := comm.NewFromEnv(ctx, comm.Options{Timeout: timeout})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Close()
	return fn(ctx, env)
}

// checkCollectives is commWorker's body.
func checkCollectives(ctx context.Context, env *comm.Env) int {
	r, w := env.Rank(), env.Size()
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "rank %d: "+format+"\n", append([]any{r}, a...)...)
		return 1
	}
	const n = 11
	for _, d := range []comm.DType{comm.Float32, comm.Float64, comm.BFloat16, comm.Float16, comm.Int32, comm.Int64, comm.Uint8} {
		for _, op := range []comm.ReduceOp{comm.Sum, comm.Avg, comm.Min, comm.Max, comm.Prod} {
			// all_reduce of n elements, then reduce_scatter of w x n.
			x, err := env.Allocator.Empty(int64(n*d.Size()), 0)
			if err != nil {
				return fail("%v", err)
			}
			for i := range n {
				put(x.Bytes(), d, i, float64(1+(r+i)%2)) // 1 or 2: exact everywhere
			}
			if err := comm.Sync(ctx)(env.AllReduce(x, d, op)); err != nil {
				return fail("all_reduce %s %s: %v", d, op, err)
			}
			for i := range n {
				if got, want := get(x.Bytes(), d, i), reduced(d, op, w, i); math.Abs(got-want) > 1e-2*math.Abs(want) {
					return fail("all_reduce %s %s: element %d = %v; want %v", d, op, i, got, want)
				}
			}
			all, err := env.Allocator.Empty(int64(w*n*d.Size()), 0)
			if err != nil {
				return fail("%v", err)
			}
			for i := range w * n {
				put(all.Bytes(), d, i, float64(1+(r+i)%2))
			}
			if err := comm.Sync(ctx)(env.ReduceScatter(x, all, d, op)); err != nil {
				return fail("reduce_scatter %s %s: %v", d, op, err)
			}
			for i := range n {
				if got, want := get(x.Bytes(), d, i), reduced(d, op, w, r*n+i); math.Abs(got-want) > 1e-2*math.Abs(want) {
					return fail("reduce_scatter %s %s: element %d = %v; want %v", d, op, i, got, want)
				}
			}
			x.Release()
			all.Release()
		}
	}
	in, _ := env.Allocator.Empty(4, 0)
	out, _ := env.Allocator.Empty(int64(4*w), 0)
	put(in.Bytes(), comm.Int32, 0, float64(r*r))
	if err := comm.Sync(ctx)(env.AllGather(out, in)); err != nil {
		return fail("all_gather: %v", err)
	}
	for q := range w {
		if got := get(out.Bytes(), comm.Int32, q); got != float64(q*q) {
			return fail("all_gather: from rank %d got %v", q, got)
		}
	}
	put(in.Bytes(), comm.Int32, 0, float64(100+r))
	if err := comm.Sync(ctx)(env.Broadcast(in, w-1)); err != nil || get(in.Bytes(), comm.Int32, 0) != float64(100+w-1) {
		return fail("broadcast: %v, %v", err, get(in.Bytes(), comm.Int32, 0))
	}
	src, _ := env.Allocator.Empty(int64(4*w), 0)
	for q := range w {
		put(src.Bytes(), comm.Int32, q, float64(10*r+q))
	}
	if err := comm.Sync(ctx)(env.AllToAll(out, src)); err != nil {
		return fail("all_to_all: %v", err)
	}
	for q := range w {
		if got := get(out.Bytes(), comm.Int32, q); got != float64(10*q+r) {
			return fail("all_to_all: from rank %d got %v", q, got)
		}
	}
	// send and receive around the ring; even ranks send first.
	if w > 1 {
		put(in.Bytes(), comm.Int32, 0, float64(1000+r))
		got, _ := env.Allocator.Empty(4, 0)
		send := func() error { return comm.Sync(ctx)(env.Send(in, (r+1)%w)) }
		recv := func() error { return comm.Sync(ctx)(env.Recv(got, (r-1+w)%w)) }
		first, second := send, recv
		if r%2 == 1 {
			first, second = recv, send
		}
		if err := first(); err != nil {
			return fail("send/recv: %v", err)
		}
		if err := second(); err != nil {
			return fail("send/recv: %v", err)
		}
		if v := get(got.Bytes(), comm.Int32, 0); v != float64(1000+(r-1+w)%w) {
			return fail("recv from rank %d: got %v", (r-1+w)%w, v)
		}
	}
	if err := comm.Sync(ctx)(env.Barrier()); err != nil {
		return fail("barrier: %v", err)
	}
	fmt.Printf("rank %d of %d: every collective checked\n", r, w)
	return 0
}

// reduced is element i's reduction over w ranks when rank q holds
// 1+(q+i)%2 there.
func reduced(d comm.DType, op comm.ReduceOp, w, i int) float64 {
	ones, twos := 0, 0
	for q := range w {
		if (q+i)%2 == 0 {
			ones++
		} else {
			twos++
		}
	}
	switch op {
	case comm.Prod:
		return math.Pow(2, float64(twos))
	case comm.Min:
		return map[bool]float64{true: 1, false: 2}[ones > 0]
	case comm.Max:
		return map[bool]float64{true: 2, false: 1}[twos > 0]
	case comm.Avg:
		avg := float64(ones+2*twos) / float64(w)
		if d == comm.Int32 || d == comm.Int64 || d == comm.Uint8 {
			avg = math.Trunc(avg)
		}
		return avg
	}
	return float64(ones + 2*twos)
}

func put(b []byte, d comm.DType, i int, v float64) { comm.SetElement(b, d, i, v) }

func get(b []byte, d comm.DType, i int) float64 { return comm.Element(b, d, i) }

// TestCollectivesBetweenProcesses runs the collectives between worker
// processes launched by gorun, at world sizes 1 to 5.
func TestCollectivesBetweenProcesses(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for w := 1; w <= 5; w++ {
		r := runGorun(t, testEnv(commWorkerEnv+"=1"), "--nproc-per-node="+strconv.Itoa(w), "--no-python", self)
		if r.code != 0 || strings.Count(r.stdout, "every collective checked") != w {
			t.Errorf("world %d: exit %d\n%s\n%s", w, r.code, r.stdout, r.stderr)
		}
	}
}

// TestGoDDPSameModelAnyWorld: examples/ddp trains the same model on 1, 3
// and 5 ranks (the global batch is split and gradients summed).
func TestGoDDPSameModelAnyWorld(t *testing.T) {
	t.Parallel()
	var lines []string
	for _, w := range []string{"1", "3", "5"} {
		r := runGorun(t, testEnv(), "--nproc-per-node="+w, "--no-python", ddpBin, "--steps", "5")
		final := linesWithPrefix(r.stdout, "[default0]:final ")
		if r.code != 0 || len(final) != 1 {
			t.Fatalf("world %s: exit %d\n%s\n%s", w, r.code, r.stdout, r.stderr)
		}
		lines = append(lines, final[0])
	}
	parse := func(s string) (loss, sum float64) {
		fmt.Sscanf(s, "loss=%g checksum=%g", &loss, &sum)
		return
	}
	l0, c0 := parse(lines[0])
	for _, l := range lines[1:] {
		if l1, c1 := parse(l); math.Abs(l1-l0) > 1e-6*math.Abs(l0) || math.Abs(c1-c0) > 1e-5 {
			t.Errorf("worlds differ: %q vs %q", lines[0], l)
		}
	}
}

// TestGoDDPHungRankTimesOut: rank 1 stops calling collectives at step 2;
// with a 3 s collective timeout every rank stops within a few seconds of
// it, every rank dumps its flight recorder, and both gorun's failure
// summary and gorun trace name rank 1 and the collective.
func TestGoDDPHungRankTimesOut(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	start := time.Now()
	r := runGorun(t, testEnv(), "--nproc-per-node=3", "--log-dir", logs, "--rdzv-id", "hang", "--no-python", ddpBin,
		"--steps", "10", "--hang-rank", "1", "--hang-step", "2", "--collective-timeout", "3s")
	took := time.Since(start)
	if r.code == 0 || took > 3*time.Second+8*time.Second {
		t.Errorf("exit %d after %v; want a failure within a few seconds of the 3 s timeout\n%s", r.code, took, r.stderr)
	}
	if !strings.Contains(r.stderr, "exitcode  : 124") {
		t.Errorf("no rank exited with the collective-timeout code 124\n%s", r.stderr)
	}
	verdict := "all_reduce #12 never completed; rank(s) 0, 2 wait in it; rank(s) 1 never called it"
	if !strings.Contains(r.stderr, "Flight recorder (gorun trace ") || !strings.Contains(r.stderr, verdict) {
		t.Errorf("the failure summary lacks the verdict %q\n%s", verdict, r.stderr)
	}
	dir := filepath.Join(runFolder(t, logs, "hang"), "attempt_0", "flight_recorder")
	for rank := range 3 {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("fr_trace_rank_%d.json", rank))); err != nil {
			t.Errorf("rank %d: no dump: %v", rank, err)
		}
	}
	tr := runGorun(t, testEnv(), "trace", dir)
	if tr.code != 0 || !strings.Contains(tr.stdout, verdict) {
		t.Errorf("gorun trace: exit %d\n%s%s", tr.code, tr.stdout, tr.stderr)
	}
	// --format after the directory, as people type it.
	js := runGorun(t, testEnv(), "trace", dir, "--format", "json")
	var v watchdog.Verdict
	if err := json.Unmarshal([]byte(js.stdout), &v); err != nil || js.code != 0 || len(v.Groups) != 1 || v.Groups[0].Stuck == nil ||
		fmt.Sprint(v.Groups[0].Stuck.NeverCalled) != "[1]" || v.Groups[0].Stuck.Op != "all_reduce" {
		t.Errorf("gorun trace --format json: exit %d, %v\n%s%s", js.code, err, js.stdout, js.stderr)
	}
}

var ddpBin = filepath.Join(os.TempDir(), "unset")

// TestSIGUSR1DumpsTheFlightRecorder: SIGUSR1 to gorun reaches the
// workers, each dumps its flight recorder, and the job goes on.
func TestSIGUSR1DumpsTheFlightRecorder(t *testing.T) {
	t.Parallel()
	dumps := t.TempDir()
	// Rank 0 idles at step 2 (the others wait for it in a collective with
	// a long timeout): a job that is running when the signal comes.
	cmd, _, stderr := startGorun(t, testEnv("GORUN_FR_DUMP_DIR="+dumps), "--nproc-per-node=2", "--no-python", ddpBin,
		"--steps", "10", "--hang-rank", "0", "--hang-step", "2", "--collective-timeout", "5m")
	waitFor(t, "rank 0 to idle", func() bool { return strings.Contains(stderr.String(), "hanging at step 2") })
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both dumps", func() bool {
		n := 0
		for r := range 2 {
			if _, err := os.Stat(filepath.Join(dumps, fmt.Sprintf("fr_trace_rank_%d.json", r))); err == nil {
				n++
			}
		}
		return n == 2
	})
	d, err := watchdog.ReadDump(filepath.Join(dumps, "fr_trace_rank_1.json"))
	if err != nil || d.Reason != "SIGUSR1" || d.PGStatus["0"].LastCompleted < 1 {
		t.Errorf("rank 1's dump: %+v, %v", d.PGStatus, err)
	}
	if cmd.ProcessState != nil {
		t.Error("the job ended on SIGUSR1")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, cmd)
}
