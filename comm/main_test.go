package comm

import (
	"os"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/leakcheck"
)

// TestMain fails the package if its tests leave goroutines running. Run
// with killedRankEnv set, the test binary is a rank that waits to be
// killed (see TestKilledRankIsNotWaitedFor).
func TestMain(m *testing.M) {
	if addr := os.Getenv(killedRankEnv); addr != "" {
		os.Exit(killedRank(addr))
	}
	os.Exit(leakcheck.Main(m, 5*time.Second))
}
