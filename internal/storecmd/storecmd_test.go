package storecmd

import (
	"bytes"
	"strings"
	"testing"
)

// TestServing: the member's announcement is what its runner waits for,
// and nothing else the command prints is.
func TestServing(t *testing.T) {
	var b bytes.Buffer
	if err := AnnounceMember(&b, "1 of 3", []string{"10.0.0.1:2379"}, "; stop with Ctrl-C"); err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSuffix(b.String(), "\n")
	if want := "gorun store: member 1 of 3 serving at [10.0.0.1:2379]; stop with Ctrl-C"; line != want {
		t.Errorf("announced %q; want %q", line, want)
	}
	for _, tc := range []struct {
		line string
		want bool
	}{
		{line, true},
		{"gorun store: etcd serving at [127.0.0.1:2379]; stop with Ctrl-C", false},
		{"gorun store: error: member 1 of 3 taken", false},
		{"", false},
	} {
		if got := Serving(tc.line); got != tc.want {
			t.Errorf("Serving(%q) = %v; want %v", tc.line, got, tc.want)
		}
	}
	if got := Arg(Listen, "127.0.0.1:1"); got != "--listen=127.0.0.1:1" {
		t.Errorf("Arg = %q", got)
	}
}
