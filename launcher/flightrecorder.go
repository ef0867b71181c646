package launcher

import (
	"fmt"
	"strings"

	"github.com/gorun-dev/gorun/watchdog"
)

// EnvFlightRecorderDir tells workers where to dump their flight recorders
// (comm's watchdog reads it); gorun sets it per attempt unless the user
// did.
const EnvFlightRecorderDir = "GORUN_FR_DUMP_DIR"

// reportHang prints the verdict of the flight-recorder dumps that the
// workers of a failed attempt left in dir, if any: the same as `gorun
// trace dir`.
func reportHang(cfg *Config, dir string) {
	v, err := watchdog.AnalyzeDir(dir)
	if err != nil {
		return // no dumps: the failure was not a collective's
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Flight recorder (gorun trace %s):\n", dir)
	for _, l := range v.Summary {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	fmt.Fprint(cfg.Stderr, b.String())
}
