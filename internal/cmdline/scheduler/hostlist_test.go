package scheduler

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
		err  string // in the error; "" for none
	}{
		{in: "login1", want: []string{"login1"}},
		{in: "a,b , c", want: []string{"a", "b", "c"}},
		{in: "node[1-3]", want: []string{"node1", "node2", "node3"}},
		{in: "gpu-[001-004,010],login1", want: []string{"gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-010", "login1"}},
		{in: "n[08-11]", want: []string{"n08", "n09", "n10", "n11"}},
		{in: "n[9-10]", want: []string{"n9", "n10"}},
		{in: "n[7]", want: []string{"n7"}},
		{in: "n[1,3,5-6]x", want: []string{"n1x", "n3x", "n5x", "n6x"}},
		{in: "rack[1-2]-node[01-02]", want: []string{"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}},
		{in: "a[1-2],b[3-4]", want: []string{"a1", "a2", "b3", "b4"}},
		{in: "127.0.0.[1-3]", want: []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}},
		{in: "[1-2]", want: []string{"1", "2"}},
		{in: "", err: "empty"},
		{in: "a,,b", err: "empty name"},
		{in: "node[1-3", err: "without its ']'"},
		{in: "node1-3]", err: "without '['"},
		{in: "node[[1-2]]", err: "do not nest"},
		{in: "node[]", err: "empty brackets"},
		{in: "node[3-1]", err: "backwards"},
		{in: "node[a-c]", err: "not a number"},
		{in: "node[1-2-3]", err: "not a number"},
		{in: "node[0-99999999]", err: "more than 65536"},
		{in: "a[0-999]b[0-999]", err: "more than 65536"},
		{in: "node[1-9999999999]", err: "not a number"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ExpandHostlist(tt.in)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("ExpandHostlist(%q): %v", tt.in, err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrHostlist)):
				t.Fatalf("ExpandHostlist(%q) = %v, %v; want an error saying %q", tt.in, got, err, tt.err)
			case tt.err == "" && !slices.Equal(got, tt.want):
				t.Errorf("ExpandHostlist(%q) = %v; want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestExpandTasksPerNode(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "1", want: []int{1}},
		{in: "2(x3),1", want: []int{2, 2, 2, 1}},
		{in: "1(x4)", want: []int{1, 1, 1, 1}},
		{in: "x", bad: true},
		{in: "2(x0)", bad: true},
		{in: "2(x99999999)", bad: true},
	} {
		got, err := ExpandTasksPerNode(tt.in)
		if (err != nil) != tt.bad || (!tt.bad && !slices.Equal(got, tt.want)) {
			t.Errorf("ExpandTasksPerNode(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.bad)
		}
	}
}
