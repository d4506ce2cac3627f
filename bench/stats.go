package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Spread is the median and range of one figure over repetitions.
type Spread struct {
	Med, Min, Max float64
	N             int
}

// spreadOf summarises values; NaNs are dropped.
func spreadOf(vs []float64) Spread {
	var xs []float64
	for _, v := range vs {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return Spread{Med: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(xs)
	med := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		med = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return Spread{Med: med, Min: xs[0], Max: xs[len(xs)-1], N: len(xs)}
}

// percentile of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Formatting for the report.

// fmtRate prints a per-second rate with thousands, e.g. 34.1k.
func fmtRate(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.2fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// rateSpread prints "34.1k (33.0k–35.2k)".
func rateSpread(s Spread) string {
	if math.IsNaN(s.Med) {
		return "–"
	}
	if s.N <= 1 {
		return fmtRate(s.Med)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtRate(s.Med), fmtRate(s.Min), fmtRate(s.Max))
}

// numSpread prints a spread with a format for each number.
func numSpread(s Spread, format string) string {
	if math.IsNaN(s.Med) {
		return "–"
	}
	if s.N <= 1 || s.Min == s.Max {
		return fmt.Sprintf(format, s.Med)
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", s.Med, s.Min, s.Max)
}

// ratioSpread prints "1.23x (1.20–1.30)".
func ratioSpread(s Spread) string {
	if math.IsNaN(s.Med) {
		return "–"
	}
	if s.N <= 1 {
		return fmt.Sprintf("%.2fx", s.Med)
	}
	return fmt.Sprintf("%.2fx (%.2f–%.2f)", s.Med, s.Min, s.Max)
}

// msSpread prints milliseconds.
func msSpread(s Spread) string {
	if math.IsNaN(s.Med) {
		return "–"
	}
	f := "%.2f"
	if s.Max < 0.1 {
		f = "%.3f"
	}
	return numSpread(s, f)
}
