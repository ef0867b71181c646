package launcher

import (
	"os"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/leakcheck"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m, 5*time.Second)) }
