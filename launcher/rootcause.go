package launcher

import (
	"slices"
	"time"

	"github.com/gorun-dev/gorun/watchdog"
)

// The root cause of a failed attempt: which of the workers that failed
// made the others fail. The failure summary names it first, its error
// file is the one copied to TORCHELASTIC_ERROR_FILE, and the rendezvous
// reports its exit code to every node. Where the failures came from a
// rank that left while the others ran, placeLeft (peerloss.go) decides;
// where a hang was judged, the verdict names it (lifewatch.go).

// exitSeenSlack is how much later gorun may see a worker's exit than
// another that came of it: each worker is reaped by its own goroutine, so
// on a busy machine a rank that died first (SIGKILL, a segfault) can be
// seen after the peer that its death made fail a few milliseconds later.
// A failure that says it lost a peer is put behind one that does not and
// was seen at most this much later; a second is far above the scheduling
// delays seen on a loaded 2-core machine, and far below the seconds a
// peer takes to notice a lost one by a timeout.
const exitSeenSlack = time.Second

// orderFailures orders failures root cause first: by the time gorun saw
// them, except that a rank another's failure stopped (its watchdog's
// ExitRemoteAbort) never leads, and that a failure whose error says it
// lost a peer follows a failure with no such words seen at most
// exitSeenSlack after it (the peer's death is the cause, whatever order
// the two exits were reaped in).
func orderFailures(failures []Failure, tailOf func(Failure) string) []Failure {
	slices.SortStableFunc(failures, func(a, b Failure) int {
		ra, rb := a.ExitCode == watchdog.ExitRemoteAbort, b.ExitCode == watchdog.ExitRemoteAbort
		if ra != rb {
			if ra {
				return 1
			}
			return -1
		}
		return a.Time.Compare(b.Time)
	})
	lostPeer := make([]bool, len(failures))
	for i, f := range failures {
		cause, _ := causeOf(f, tailOf(f))
		lostPeer[i] = cause == causeLostPeer && f.Hung == ""
	}
	for i := 0; i < len(failures); i++ {
		if !lostPeer[i] || failures[i].ExitCode == watchdog.ExitRemoteAbort {
			continue
		}
		for j := i + 1; j < len(failures); j++ {
			if failures[j].ExitCode == watchdog.ExitRemoteAbort || failures[j].Time.Sub(failures[i].Time) > exitSeenSlack {
				break
			}
			if !lostPeer[j] {
				// j to i; i..j-1 one down.
				f, l := failures[j], lostPeer[j]
				copy(failures[i+1:j+1], failures[i:j])
				copy(lostPeer[i+1:j+1], lostPeer[i:j])
				failures[i], lostPeer[i] = f, l
				break
			}
		}
	}
	return failures
}
