package budget

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the units ParseSize accepts, longest first within a
// family so that "GiB" is not read as "B".
var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseSize reads a byte count: plain bytes ("1073741824") or a number
// with a unit, binary (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB),
// with or without a space ("24GiB", "21.5 GB"). Units are case-sensitive:
// in a budget "Gb" is more likely a mistake than gigabits.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			mult = u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || t[0] == '+' || t[0] == '-' {
		return 0, fmt.Errorf("invalid size %q: want bytes or a number with a unit such as 24GiB", s)
	}
	b := v * mult
	if math.IsNaN(b) || math.IsInf(b, 0) || b >= math.MaxInt64 {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return uint64(b), nil
}

// ParseRatio reads a ratio between 0 and 1, written as a fraction
// ("0.3") or a percentage ("30%"); "none" is [NoLimit].
func ParseRatio(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if t == "none" {
		return NoLimit, nil
	}
	scale := 1.0
	if p, ok := strings.CutSuffix(t, "%"); ok {
		t, scale = strings.TrimSpace(p), 100
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("invalid ratio %q: want a fraction such as 0.3, a percentage such as 30%%, or none", s)
	}
	v /= scale
	if v < 0 || v > 1 {
		if scale == 1 && v > 1 && v <= 100 {
			return 0, fmt.Errorf("invalid ratio %q: not between 0 and 1 (for a percentage write %s%%)", s, t)
		}
		return 0, fmt.Errorf("invalid ratio %q: not between 0 and 1", s)
	}
	return v, nil
}

// FormatRatio formats a ratio as a percentage with one decimal: "9.7%";
// "none" for [NoLimit] and "n/a" for NaN.
func FormatRatio(r float64) string {
	switch {
	case math.IsInf(r, 1):
		return "none"
	case math.IsNaN(r) || math.IsInf(r, 0):
		return "n/a"
	}
	return strconv.FormatFloat(100*r, 'f', 1, 64) + "%"
}

// formatPoints formats a difference of ratios in percentage points.
func formatPoints(d float64) string {
	return strconv.FormatFloat(100*d, 'f', 1, 64) + " points"
}
