package units

import (
	"fmt"
	"strconv"
)

var binaryUnits = [...]string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// FormatBytes formats n bytes for people: below 1 KiB as a plain count
// ("512 B"), otherwise with two decimals in the largest binary unit that
// keeps the number below 1024 ("19.27 GiB"). Negative values keep their sign.
func FormatBytes(n int64) string {
	if n < 0 {
		// the magnitude as uint64, so that math.MinInt64 does not overflow
		return "-" + FormatUBytes(-uint64(n))
	}
	return FormatUBytes(uint64(n))
}

// FormatUBytes is FormatBytes for an unsigned count: every uint64, up to
// 16.00 EiB.
func FormatUBytes(u uint64) string {
	if u < 1024 {
		return strconv.FormatUint(u, 10) + " B"
	}
	v := float64(u)
	unit := 0
	// Step up while the two-decimal rendering would reach 1024.00, so that
	// 1 MiB - 1 B prints as "1.00 MiB" rather than "1024.00 KiB".
	for v >= 1024-0.005 && unit < len(binaryUnits)-1 {
		v /= 1024
		unit++
	}
	return fmt.Sprintf("%.2f %s", v, binaryUnits[unit])
}

// FormatSizeTorch formats n bytes the way PyTorch's C++ format_size does in
// its out-of-memory messages (c10/core/Allocator.h): up to 1024 bytes as
// "<n> bytes", then "%.2f KiB" up to 1 MiB, "%.2f MiB" up to 1 GiB and
// "%.2f GiB" beyond. The boundaries are inclusive: 1024 is "1024 bytes" and
// 1 MiB is "1024.00 KiB".
func FormatSizeTorch(n uint64) string {
	switch {
	case n <= 1024:
		return strconv.FormatUint(n, 10) + " bytes"
	case n <= 1<<20:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	case n <= 1<<30:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
}

// IsByteUnit reports whether s is one of the units FormatBytes writes.
func IsByteUnit(s string) bool {
	for _, u := range binaryUnits {
		if s == u {
			return true
		}
	}
	return false
}

// FormatCount formats a count with thousands separators, as every report
// shows counts: 8,963; -1,234.
func FormatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return sign + s
}

// FormatGiB is a card-sized figure as device tables (nvidia-smi's) show
// it: GiB with one decimal, "79.6 GiB".
func FormatGiB(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// FormatGiBPair is used / total in GiB with one decimal: "12.0 / 79.6 GiB".
func FormatGiBPair(used, total uint64) string {
	return fmt.Sprintf("%.1f / %.1f GiB", float64(used)/(1<<30), float64(total)/(1<<30))
}

// FormatCompact is a process's memory as device tables show it: whole
// MiB below 1 GiB ("300 MiB"), FormatGiB above.
func FormatCompact(b uint64) string {
	if b < 1<<30 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return FormatGiB(b)
}
