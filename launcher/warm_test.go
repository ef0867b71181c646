package launcher

import "testing"

func TestIsModuleName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"torch", true}, {"torch.distributed", true}, {"_private.mod2", true}, {"numpy", true},
		{"", false}, {"torch.", false}, {".torch", false}, {"a..b", false}, {"2fast", false},
		{"os;rm", false}, {"torch distributed", false}, {"../etc", false}, {"a-b", false},
	} {
		if got := isModuleName(tc.name); got != tc.ok {
			t.Errorf("isModuleName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}
