// Package bench measures gorun against its anchors in the same run:
// torchrun for launching and restarting, the bare spawn of the same
// processes as the floor. Results are medians with min and max.
package bench

import (
	"fmt"
	"slices"
	"time"
)

// Sample is a set of measured durations.
type Sample []time.Duration

// Stats summarises a Sample.
type Stats struct {
	N      int           `json:"n"`
	Median time.Duration `json:"median_ns"`
	Min    time.Duration `json:"min_ns"`
	Max    time.Duration `json:"max_ns"`
}

// Stats returns the median, min and max of s.
func (s Sample) Stats() Stats {
	if len(s) == 0 {
		return Stats{}
	}
	v := slices.Clone(s)
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Stats{N: len(v), Median: med, Min: v[0], Max: v[len(v)-1]}
}

// String renders the stats as "median [min-max]" in milliseconds.
func (st Stats) String() string {
	if st.N == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%s [%s-%s]", ms(st.Median), ms(st.Min), ms(st.Max))
}

func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0f ms", f)
	case f >= 10:
		return fmt.Sprintf("%.1f ms", f)
	default:
		return fmt.Sprintf("%.2f ms", f)
	}
}

// Ratio returns a/b of the medians, or 0 when b is missing.
func Ratio(a, b Stats) float64 {
	if b.N == 0 || b.Median == 0 {
		return 0
	}
	return float64(a.Median) / float64(b.Median)
}
