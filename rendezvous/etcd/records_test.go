package etcd

import (
	"slices"
	"testing"
)

func TestArrivalRuns(t *testing.T) {
	arrived := func(revs ...int64) []NodeRecord {
		var out []NodeRecord
		for _, r := range revs {
			out = append(out, NodeRecord{NodeRank: -1, PrevRank: -1, Revision: r})
		}
		return out
	}
	many := make([]int64, 0, 2*maxArrivalRuns+2)
	for i := range int64(maxArrivalRuns + 1) {
		many = append(many, 10+2*i) // every arrival a run of its own
	}
	tests := []struct {
		name    string
		members []NodeRecord
		want    [][2]int64
	}{
		{"one node", arrived(7), [][2]int64{{7, 1}}},
		{"consecutive joins are one run", arrived(5, 6, 7, 8), [][2]int64{{5, 4}}},
		{"a gap starts a run", arrived(5, 6, 9, 10, 11), [][2]int64{{5, 2}, {9, 3}}},
		{"an asked-for rank keeps rank keys", append(arrived(5), NodeRecord{NodeRank: 1, PrevRank: -1, Revision: 6}), nil},
		{"an earlier round's order keeps rank keys", append(arrived(5), NodeRecord{NodeRank: -1, PrevRank: 0, Revision: 6}), nil},
		{"too many runs keep rank keys", arrived(many...), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := arrivalRuns(tt.members)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("arrivalRuns = %v; want %v", got, tt.want)
			}
		})
	}
}

func TestArrivalRank(t *testing.T) {
	runs := [][2]int64{{5, 2}, {9, 3}}
	tests := []struct {
		rev    int64
		group  int
		member bool
	}{
		{5, 0, true}, {6, 1, true}, {9, 2, true}, {11, 4, true},
		{4, 0, false}, {7, 0, false}, {8, 0, false}, {12, 0, false},
	}
	for _, tt := range tests {
		g, ok := arrivalRank(runs, tt.rev)
		if ok != tt.member || (ok && g != tt.group) {
			t.Errorf("arrivalRank(%v, %d) = %d, %v; want %d, %v", runs, tt.rev, g, ok, tt.group, tt.member)
		}
	}
}
