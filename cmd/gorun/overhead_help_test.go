package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHelpMatchesUrfave: the launch flags cache their names instead of
// letting urfave recompute them with a regular expression at every lookup
// (a millisecond of every launch). testdata/help.txt was written by the
// plain urfave flags before that change, so the cached names and help
// lines must print the same help, byte for byte: names, aliases, default
// values, environment variables, categories and their order.
func TestHelpMatchesUrfave(t *testing.T) {
	t.Parallel()
	golden := filepath.Join("testdata", "help.txt")
	for _, args := range [][]string{{"--help"}, {"-h"}} {
		r := runGorun(t, testEnv(), args...)
		if r.code != 0 {
			t.Fatalf("gorun %v: exit %d\n%s", args, r.code, r.stderr)
		}
		if *updateGolden {
			if err := os.WriteFile(golden, []byte(r.stdout), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if r.stdout != string(want) {
			t.Errorf("gorun %v differs from %s (go test -update rewrites it):\n%s", args, golden, r.stdout)
		}
	}
}
