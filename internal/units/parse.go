package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the units ParseSize accepts, in any case, longest first
// so that "GiB" is not read as "B". A bare prefix (16G) and the IEC forms
// (16Gi, 16GiB) are binary, as card sizes and PyTorch are; only the SI
// forms with a B (16GB) are decimal.
var sizeUnits = []struct {
	suffix  string
	mult    float64
	decimal bool
}{
	{"kib", 1 << 10, false}, {"mib", 1 << 20, false}, {"gib", 1 << 30, false}, {"tib", 1 << 40, false},
	{"kb", 1e3, true}, {"mb", 1e6, true}, {"gb", 1e9, true}, {"tb", 1e12, true},
	{"ki", 1 << 10, false}, {"mi", 1 << 20, false}, {"gi", 1 << 30, false}, {"ti", 1 << 40, false},
	{"k", 1 << 10, false}, {"m", 1 << 20, false}, {"g", 1 << 30, false}, {"t", 1 << 40, false},
	{"b", 1, false},
}

// sizeForms is what the error says ParseSize accepts.
const sizeForms = "want bytes or a number with a unit: 16G, 16Gi or 16GiB (binary, any case) or 16GB (decimal); K, M, G, T"

// ParseSize reads a byte count: plain bytes ("1073741824") or a number
// with a unit, with or without a space ("24GiB", "24g", "21.5 GB"); see
// sizeUnits.
func ParseSize(s string) (uint64, error) {
	n, _, err := parseSize(s)
	return n, err
}

func parseSize(s string) (n uint64, decimal bool, err error) {
	t := strings.TrimSpace(s)
	lower := strings.ToLower(t)
	mult := 1.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(lower, u.suffix) {
			if u.decimal && t[len(t)-1] == 'b' {
				// "20Gb", "20gb": gigabits, or a typo; either way ambiguous
				return 0, false, fmt.Errorf("invalid size %q: a lowercase b is bits; %s", s, sizeForms)
			}
			t = strings.TrimSpace(t[:len(t)-len(u.suffix)])
			mult, decimal = u.mult, u.decimal
			break
		}
	}
	// digits, a point and an exponent only: no sign, hex, Inf or NaN
	if t == "" || strings.Trim(t, "0123456789.eE+-") != "" || t[0] < '0' && t[0] != '.' || t[0] > '9' {
		return 0, false, fmt.Errorf("invalid size %q: %s", s, sizeForms)
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, false, fmt.Errorf("invalid size %q: %s", s, sizeForms)
	}
	b := v * mult
	if math.IsNaN(b) || math.IsInf(b, 0) || b >= math.MaxInt64 {
		return 0, false, fmt.Errorf("invalid size %q: too large", s)
	}
	return uint64(b), decimal, nil
}

// cardGiB are the memory sizes of common GPUs, in GiB, that a decimal
// size is most likely a mistake for.
var cardGiB = []float64{4, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 128, 141, 144, 180, 192}

// SizeNote is a note for a decimal size that is close to a common card's
// size, which cards give in binary units: "80GB is 80,000,000,000 bytes;
// an 80 GiB card has 85,899,345,920: write 80GiB for it". It is "" for
// every other size, and for one that does not parse.
func SizeNote(s string) string {
	n, decimal, err := parseSize(s)
	if err != nil || !decimal {
		return ""
	}
	gb := float64(n) / 1e9
	for _, c := range cardGiB {
		if math.Abs(gb-c) <= 0.01*c {
			g := strconv.FormatFloat(c, 'f', -1, 64)
			return fmt.Sprintf("%s is %s bytes (decimal); a card of %s GiB has %s: write %sGiB for it",
				strings.TrimSpace(s), FormatCount(int64(n)), g, FormatCount(int64(c*(1<<30))), g)
		}
	}
	return ""
}

// NoLimit is a ratio limit that is off ("none"): +Inf.
var NoLimit = math.Inf(1)

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

// Ratio and Size are command-line flag values (flag.Value, plus the Type
// that pflag shows in help): a ratio as ParseRatio reads it, a size as
// ParseSize reads it, zero refused.
type (
	Ratio float64
	Size  uint64
)

func (r *Ratio) String() string { return FormatRatio(float64(*r)) }
func (r *Ratio) Type() string   { return "ratio" }
func (r *Ratio) Set(s string) error {
	v, err := ParseRatio(s)
	if err == nil {
		*r = Ratio(v)
	}
	return err
}

func (z *Size) String() string {
	if *z == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(*z), 10)
}
func (z *Size) Type() string { return "size" }
func (z *Size) Set(s string) error {
	n, err := ParseSize(s)
	if err == nil && n == 0 {
		err = fmt.Errorf("invalid size %q: zero bytes", s)
	}
	if err == nil {
		*z = Size(n)
	}
	return err
}

// FormatPoints formats a difference of ratios in percentage points:
// "4.2 points".
func FormatPoints(d float64) string {
	return strconv.FormatFloat(100*d, 'f', 1, 64) + " points"
}

// ParsePercent reads a non-negative percentage with no upper bound, the %
// sign optional ("5%", "5", "150%"), as a fraction (0.05): how much a
// figure may grow.
func ParsePercent(s string) (float64, error) {
	t := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%"))
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("want a percentage such as 5%%, not %q", s)
	}
	return v / 100, nil
}

// SizeNotes are the SizeNote of each size of a comma-separated list
// (a sweep's cards), those that have one.
func SizeNotes(list string) []string {
	var out []string
	for item := range strings.SplitSeq(list, ",") {
		if n := SizeNote(item); n != "" {
			out = append(out, n)
		}
	}
	return out
}
