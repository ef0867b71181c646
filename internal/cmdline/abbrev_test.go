package cmdline

import (
	"slices"
	"strings"
	"testing"
)

// TestExpandAbbreviations: unambiguous prefixes of launch flags, in both
// spellings, are written out as argparse reads them; the script's own
// arguments, a command's and values are never touched; an ambiguous
// prefix is an error naming the candidates.
func TestExpandAbbreviations(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		in   []string
		want []string
		err  string
	}{
		{"pytorch's own test", []string{"--nproc=2", "--redirect=3", "x.py"}, []string{"--nproc-per-node=2", "--redirects=3", "x.py"}, ""},
		{"separate value", []string{"--nproc", "2", "x.py", "--nproc=1"}, []string{"--nproc-per-node", "2", "x.py", "--nproc=1"}, ""},
		{"underscore spelling", []string{"--nproc_per=4", "--max_rest", "3", "x.py"}, []string{"--nproc_per_node=4", "--max_restarts", "3", "x.py"}, ""},
		{"bool", []string{"--standa", "x.py"}, []string{"--standalone", "x.py"}, ""},
		{"exact names untouched", []string{"--nnodes=2", "-m", "pkg.mod", "--lr", "1"}, []string{"--nnodes=2", "-m", "pkg.mod", "--lr", "1"}, ""},
		{"value that looks like a prefix", []string{"--role", "--nproc", "x.py"}, []string{"--role", "--nproc", "x.py"}, ""},
		{"after --", []string{"--", "--nproc=2"}, []string{"--", "--nproc=2"}, ""},
		{"a command's flags", []string{"stop", "--rdzv-end=x"}, []string{"stop", "--rdzv-end=x"}, ""},
		{"unknown left to the parser", []string{"--bogus=1", "x.py"}, []string{"--bogus=1", "x.py"}, ""},
		{"ambiguous", []string{"--master=x", "x.py"}, nil, "ambiguous option: --master could match --master-addr, --master-port"},
		{"one torchrun flag among gorun's own", []string{"--re=0", "--no_", "x.py"}, []string{"--redirects=0", "--no-python", "x.py"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := expandAbbreviations(append([]string{"gorun"}, tt.in...), launchFlags())
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("expandAbbreviations(%q) = %q, %v; want an error with %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || !slices.Equal(got[1:], tt.want) {
				t.Errorf("expandAbbreviations(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}
