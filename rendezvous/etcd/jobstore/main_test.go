package jobstore

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/leakcheck"
)

// TestMain fails the package's tests if goroutines outlive them (a
// store's, a client port's, a member's supervisor).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakcheck.Wait(10 * time.Second); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "leakcheck: %d goroutines still running after the tests:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}
