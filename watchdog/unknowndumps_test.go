package watchdog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// When the store cannot say whether a rank dumped, a dump file of the
// node settles it; only the ranks without one are named, and in words
// that claim no more than gorun knows.
func TestUnknownDumps(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, DumpFileName(0)), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	gone := errors.New("connection refused")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"store gone", gone, "cannot tell whether rank(s) 1, 2 dumped their flight recorder: the store is unreachable (connection refused)"},
		{"timed out", context.DeadlineExceeded, "rank(s) 1, 2 did not report a dump of their flight recorder in time"},
		{"asked to stop", context.Canceled, "stopped waiting for the dumps of rank(s) 1, 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log strings.Builder
			h := &Handler{Rank: 1, WorldSize: 3, DumpDir: dir, Log: &log}
			h.unknownDumps(0, tc.err)
			if !strings.Contains(log.String(), tc.want) || strings.Contains(log.String(), "rank(s) 0") {
				t.Errorf("log %q; want %q, and nothing of rank 0 (its dump is here)", log.String(), tc.want)
			}
		})
	}
	var log strings.Builder
	(&Handler{WorldSize: 1, DumpDir: dir, Log: &log}).unknownDumps(0, gone)
	if log.Len() != 0 {
		t.Errorf("rank 0 dumped, yet: %q", log.String())
	}
}
