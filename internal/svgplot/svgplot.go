// Package svgplot holds the arithmetic and text helpers the SVG charts
// share: the accuracy study's (cmd/accuracy) and the overload study's
// (benchmarks/overload_svg_test.go).
package svgplot

import (
	"fmt"
	"math"
	"strings"
)

// NiceStep returns a round tick spacing (1, 2, 2.5 or 5 times a power of
// ten) that gives about n ticks up to top; 1 when top is not positive.
func NiceStep(top float64, n int) float64 {
	if top <= 0 {
		return 1
	}
	raw := top / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// Num formats a tick value without needless decimals: 5, 2.5, 0.25.
func Num(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

// Wrap splits s into lines of at most n bytes at spaces (a word longer
// than n stays whole).
func Wrap(s string, n int) []string {
	var lines []string
	for len(s) > n {
		i := strings.LastIndexByte(s[:n], ' ')
		if i <= 0 {
			break
		}
		lines = append(lines, s[:i])
		s = s[i+1:]
	}
	return append(lines, s)
}
