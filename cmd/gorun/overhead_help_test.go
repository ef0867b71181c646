package main

import (
	"testing"

	"github.com/gorun-dev/gorun/internal/testkit/golden"
)

// TestHelpMatchesUrfave: the launch flags cache their names instead of
// letting urfave recompute them with a regular expression at every lookup
// (a millisecond of every launch). testdata/help.txt was written by the
// plain urfave flags before that change, so the cached names and help
// lines must print the same help, byte for byte: names, aliases, default
// values, environment variables, categories and their order.
func TestHelpMatchesUrfave(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"-h"}} {
		r := runGorun(t, testEnv(), args...)
		if r.code != 0 {
			t.Fatalf("gorun %v: exit %d\n%s", args, r.code, r.stderr)
		}
		golden.Check(t, "help.txt", r.stdout)
	}
}
