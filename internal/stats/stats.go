// Package stats holds the small summaries that benchmarks and the
// node's own controllers take of measured samples. It owns no state.
package stats

import "slices"

// Median is the middle of xs, the mean of the two middle values for an
// even count, and 0 for none. xs is left as it was.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
