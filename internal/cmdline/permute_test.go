package cmdline

import (
	"slices"
	"testing"
)

// TestFlagsFirst: a subcommand's flags after its arguments are moved
// before them, values with their flags; a launch, "--" and a command that
// parses its own arguments are left as they are.
func TestFlagsFirst(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		in, want []string
	}{
		{"report", []string{"report", "LOGDIR", "--format", "json"}, []string{"report", "--format", "json", "LOGDIR"}},
		{"report with =", []string{"report", "LOGDIR", "--format=json"}, []string{"report", "--format=json", "LOGDIR"}},
		{"already first", []string{"trace", "--all-attempts", "DIR"}, []string{"trace", "--all-attempts", "DIR"}},
		{"bool after", []string{"trace", "DIR", "--all-attempts"}, []string{"trace", "--all-attempts", "DIR"}},
		{"subcommand", []string{"bench", "launch", "--format", "json"}, []string{"bench", "launch", "--format", "json"}},
		{"after --", []string{"report", "--", "--format"}, []string{"report", "--", "--format"}},
		{"launch untouched", []string{"train.py", "--format", "json"}, []string{"train.py", "--format", "json"}},
		{"gorun-etcd's command untouched", []string{"stop", "RUN", "--grace", "60s"}, []string{"stop", "RUN", "--grace", "60s"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"gorun"}, tt.in...)
			got := flagsFirst(newApp(Options{}, args).Commands, args)
			if !slices.Equal(got[1:], tt.want) {
				t.Errorf("flagsFirst(%q) = %q; want %q", tt.in, got[1:], tt.want)
			}
		})
	}
}
