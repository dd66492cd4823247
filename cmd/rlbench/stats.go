package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// quantile is the q-quantile (0..1) of xs by the nearest-rank method: the
// smallest value with at least q of the values at or below it. p99 of 1,000
// values is the 990th smallest, so a figure is always one that was measured.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(q * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// median is the middle value, or the mean of the two middle values.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// report collects the machine-readable figures and the human summary.
type report struct {
	lines   []string
	summary []string
	verbose bool
}

// figure prints one `BENCH <name> value=<number> unit=<unit>` line at once
// (so a scenario that fails later still leaves its figures) and keeps it.
func (r *report) figure(name string, value float64, unit string) {
	line := fmt.Sprintf("BENCH %s value=%s unit=%s", name, formatValue(value), unit)
	fmt.Println(line)
	r.lines = append(r.lines, line)
}

// note adds a line to the human summary printed at the end.
func (r *report) note(format string, args ...any) {
	r.summary = append(r.summary, fmt.Sprintf(format, args...))
}

// detail adds a line to the summary only in verbose mode (-v).
func (r *report) detail(format string, args ...any) {
	if r.verbose {
		r.note(format, args...)
	}
}

func (r *report) printSummary() {
	fmt.Println()
	fmt.Println("summary:")
	for _, s := range r.summary {
		fmt.Println("  " + strings.ReplaceAll(s, "\n", "\n  "))
	}
}

// formatValue keeps four significant figures for small values and whole
// numbers for large ones; NaN (a figure that could not be measured) prints
// as NaN so a parser sees it is missing.
func formatValue(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "NaN"
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.4g", v)
	}
}

// figureNamed prints a figure with the name of what sets it (a key shape)
// as one more key=value field after the unit.
func (r *report) figureNamed(name string, value float64, unit, by string) {
	if by == "" {
		by = "none"
	}
	line := fmt.Sprintf("BENCH %s value=%s unit=%s by=%s", name, formatValue(value), unit, by)
	fmt.Println(line)
	r.lines = append(r.lines, line)
}
