// Package timing is the one home of the durations that the tests tune to
// the machine they run on. Two kinds:
//
//   - the tolerances gorun is given (a lease's TTL, a hang timeout, a
//     stop's grace), where a value too short for a busy machine makes a
//     healthy job look dead or cut a clean stop short;
//   - the slack of a comparison with a time measured around gorun.
//
// Each value is the one that held on the suite's own machine (2 cores,
// every package's tests at once, PyTorch importing in several processes)
// and says what it was raised from. Every value goes through Stretch:
// GORUN_TEST_SLOWDOWN (a number from 1 to 100, default 1) multiplies them
// all, for a machine slower or busier than that one, without touching a
// test. A value of it that is not such a number fails the test that reads
// it, naming the variable.
//
// Deadlines for something that must happen (proctest.WaitFor's) are not
// here: they are generous by design, and only a failure waits them out.
package timing

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"testing"
	"time"
)

// EnvSlowdown names the variable that stretches every duration here.
const EnvSlowdown = "GORUN_TEST_SLOWDOWN"

// Slowdown is GORUN_TEST_SLOWDOWN's factor, 1 when unset.
func Slowdown(t testing.TB) float64 {
	t.Helper()
	s, ok := os.LookupEnv(EnvSlowdown)
	if !ok || s == "" {
		return 1
	}
	f, err := parseSlowdown(s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// parseSlowdown reads GORUN_TEST_SLOWDOWN's value.
func parseSlowdown(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < 1 || f > 100 {
		return 0, fmt.Errorf("%s=%q: want a number from 1 to 100 (how many times slower than the suite's 2-core machine this one is)", EnvSlowdown, s)
	}
	return f, nil
}

// Stretch is d times the slowdown, rounded to the millisecond.
func Stretch(t testing.TB, d time.Duration) time.Duration {
	t.Helper()
	return time.Duration(float64(d) * Slowdown(t)).Round(time.Millisecond)
}

// Seconds formats d for a flag or a --rdzv-conf value that takes
// seconds ("2", "0.5").
func Seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// LeaseTTL is the shortest etcd lease (--rdzv-conf=lease_ttl) that the
// busy suite keeps alive: its agents lost 1-s leases to scheduling alone
// (raised to 2 s).
func LeaseTTL(t testing.TB) time.Duration { return Stretch(t, 2*time.Second) }

// QuietWorker is the shortest --hang-timeout that a worker which prints
// nothing for a while, but shows life another way (a heartbeat, rank 0's
// lines, a step), stays inside on the busy suite: a 500-ms one was
// judged hung (raised to 2 s).
func QuietWorker(t testing.TB) time.Duration { return Stretch(t, 2*time.Second) }

// PythonStart is the --hang-timeout inside which PyTorch's workers show
// life while they import torch and meet (a script's own start-up lines,
// the probe's first sign): the timer runs from the spawn, and three gloo
// ranks importing torch beside the suite on 2 cores stayed silent past
// 8 s until their script printed during the import (then 10 s held).
func PythonStart(t testing.TB) time.Duration { return Stretch(t, 10*time.Second) }

// TorchImport is how long a stop's grace must last for ranks that are
// stopped while they import torch, so that they still reach their first
// step and save: the default 25 s ran out once on the busy suite
// (raised to 90 s; an idle machine takes 3 s).
func TorchImport(t testing.TB) time.Duration { return Stretch(t, 90*time.Second) }

// ExitSlack is the time gorun spends outside its own events (its start
// before the first, its exit after the last), as seen around the
// process: 0.47 s was seen on the busy suite (given 1 s).
func ExitSlack(t testing.TB) time.Duration { return Stretch(t, time.Second) }
