// Package leakcheck fails a test binary that leaves goroutines running
// after its tests: every goroutine gorun starts must have an owner that
// stops it.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// ignored are goroutines that belong to the runtime or the test framework.
var ignored = []string{
	"testing.(*M).",
	"testing.tRunner",
	"testing.runTests",
	"runtime.goexit",
	"os/signal.signal_recv",
	"os/signal.loop",
	"runtime.ensureSigM",
	"created by runtime.gc",
	"runtime.ReadTrace",
	"leakcheck.stacks",
}

// Main runs the tests of m and then fails if goroutines other than the
// framework's are still running once they have had timeout to end. Use it
// as `func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m, 5*time.Second)) }`.
func Main(m *testing.M, timeout time.Duration) int {
	code := m.Run()
	if code != 0 {
		return code
	}
	if leaked := Wait(timeout); len(leaked) > 0 {
		fmt.Fprintf(os.Stderr, "leakcheck: %d goroutines still running after the tests:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
		return 1
	}
	return 0
}

// Wait returns the stacks of goroutines still running after timeout, or
// nil as soon as there are none.
func Wait(timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	delay := time.Millisecond
	for {
		leaked := stacks()
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(delay) // polling a condition with a deadline
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// stacks returns the stacks of the goroutines that are not ignored, except
// the caller's.
func stacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 || g == "" {
			continue // the calling goroutine
		}
		keep := true
		for _, s := range ignored {
			if strings.Contains(g, s) {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, g)
		}
	}
	return out
}
