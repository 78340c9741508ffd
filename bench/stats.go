package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// median of the samples; ok is false when there are none.
func median(d []time.Duration) (time.Duration, bool) {
	if len(d) == 0 {
		return 0, false
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// ms formats a duration in milliseconds with enough digits to compare.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}

// ratio formats a/b as "0.31×"; "-" when either side is missing.
func ratio(a, b float64) string {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// bytesMB formats a byte count in MiB.
func bytesMB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
