package jobauth

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/leakcheck"
)

// TestMain fails the package's tests if goroutines outlive them (a
// probe's connection, a token file's wait).
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
