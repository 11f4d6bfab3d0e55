package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// parseSize reads a byte count: plain bytes ("1073741824") or a number
// with a unit, binary (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB).
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(u.suffix)) && (len(u.suffix) != 2 || u.suffix[1] != 'B' || !strings.HasSuffix(strings.ToLower(t), "ib")) {
			t = strings.TrimSpace(t[:len(t)-len(u.suffix)])
			mult = u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v*mult >= math.MaxUint64 {
		return 0, fmt.Errorf("invalid size %q: want bytes or a number with a unit such as 24GiB", s)
	}
	return uint64(v * mult), nil
}
