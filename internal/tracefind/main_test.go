package tracefind

import (
	"os"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/leakcheck"
)

// TestMain fails the package if its tests leave goroutines running.
func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m, 5*time.Second)) }
