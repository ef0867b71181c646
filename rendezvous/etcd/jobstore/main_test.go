package jobstore

import (
	"os"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/leakcheck"
)

// TestMain fails the package's tests if goroutines outlive them (a
// store's, a client port's, a member's supervisor).
func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m, 10*time.Second)) }
