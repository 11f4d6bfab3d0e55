package units

import (
	"math"
	"testing"
)

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1, "1 B"},
		{1023, "1023 B"},
		{1024, "1.00 KiB"},
		{1536, "1.50 KiB"},
		{1<<20 - 1, "1.00 MiB"},
		{1<<20 - 6000, "1018.14 KiB"},
		{20690984960, "19.27 GiB"},
		{1 << 40, "1.00 TiB"},
		{-1536, "-1.50 KiB"},
		{-5, "-5 B"},
		{math.MaxInt64, "8.00 EiB"},
		{math.MinInt64, "-8.00 EiB"},
	}
	for _, tt := range tests {
		if got := FormatBytes(tt.n); got != tt.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestFormatSizeTorch(t *testing.T) {
	tests := []struct {
		n    uint64
		want string
	}{
		{0, "0 bytes"},
		{512, "512 bytes"},
		{1024, "1024 bytes"},
		{1025, "1.00 KiB"},
		{1152, "1.12 KiB"}, // 1.125: ties round to even, as printf does
		{1 << 20, "1024.00 KiB"},
		{1<<20 + 1, "1.00 MiB"},
		{2 << 20, "2.00 MiB"},
		{20 << 20, "20.00 MiB"},
		{500<<20 + 3, "500.00 MiB"},
		{502 << 20, "502.00 MiB"},
		{1 << 30, "1024.00 MiB"},
		{1<<30 + 1, "1.00 GiB"},
		{2 << 30, "2.00 GiB"},
		{150109880320, "139.80 GiB"},
		{1503238553, "1.40 GiB"},
	}
	for _, tt := range tests {
		if got := FormatSizeTorch(tt.n); got != tt.want {
			t.Errorf("FormatSizeTorch(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

// Sizes of 2^63 bytes and more print as what they are, not clamped.
func TestFormatUBytesFullRange(t *testing.T) {
	for n, want := range map[uint64]string{
		1 << 63:     "8.00 EiB",
		1<<64 - 1:   "16.00 EiB",
		3 << 61:     "6.00 EiB",
		1<<63 + 512: "8.00 EiB",
	} {
		if got := FormatUBytes(n); got != want {
			t.Errorf("FormatUBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if got := FormatBytes(-1 << 63); got != "-8.00 EiB" {
		t.Errorf("FormatBytes(MinInt64) = %q", got)
	}
}

func TestFormatCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 8963: "8,963", -1234: "-1,234", 1234567: "1,234,567", math.MinInt64: "-9,223,372,036,854,775,808"} {
		if got := FormatCount(n); got != want {
			t.Errorf("FormatCount(%d) = %q, want %q", n, got, want)
		}
	}
}
