package jobauth

import (
	"os"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/leakcheck"
)

// TestMain fails the package's tests if goroutines outlive them (a
// probe's connection, a token file's wait).
func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m, 10*time.Second)) }
