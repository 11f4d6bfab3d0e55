package categories

import (
	"math"
	"testing"
)

// TestClock checks that every time comes back as given, across groups
// and slabs: small steps, a gap past 32 bits, a time going back, and the
// extremes of int64 (whose differences wrap), the last group whole or
// not. Steps of a few microseconds take a few bits a position.
func TestClock(t *testing.T) {
	var want []int64
	tm := int64(1_700_000_000_000_000)
	for i := range 3<<16 + 5 {
		switch {
		case i == 70_000:
			tm += math.MaxUint32 + 1 // a gap past 32 bits
		case i == 2<<16+1:
			tm -= 5 // back in time
		case i == 2<<16+7:
			tm = math.MinInt64
		case i == 2<<16+8:
			tm = math.MaxInt64
		case i == 2<<16+9:
			tm = 1_700_000_000_000_000
		case i%1000 == 0:
			tm += 1 << 20
		default:
			tm += int64(i % 7)
		}
		want = append(want, tm)
	}
	var c clock
	for _, v := range want {
		c.add(v)
	}
	if c.n != len(want) {
		t.Fatalf("n = %d, want %d", c.n, len(want))
	}
	for i, v := range want {
		if got := c.at(i); got != v {
			t.Fatalf("at(%d) = %d, want %d", i, got, v)
		}
	}
	for range clockGroup - 5 { // the last group whole: packed
		c.add(tm)
		want = append(want, tm)
	}
	for i := len(want) - 2*clockGroup; i < len(want); i++ {
		if got := c.at(i); got != want[i] {
			t.Fatalf("at(%d) = %d, want %d", i, got, want[i])
		}
	}
	size := 12 * len(c.first)
	for _, s := range c.slabs {
		size += len(s)
	}
	if per := float64(size) / float64(c.n); per > 0.8 {
		t.Errorf("%.2f bytes a position, want about 0.7 (most groups 3 bits a position, and the marks)", per)
	}
}

// TestClockWidths checks a group of each width of excess, 1 to 64 bits:
// those of 16 bits and fewer are packed four at a time, up to 32 two.
func TestClockWidths(t *testing.T) {
	for w := 1; w <= 64; w++ {
		var c clock
		var want []int64
		tm := int64(1_700_000_000_000_000)
		for i := range 2*clockGroup + 3 {
			step := int64(i % 5)
			if i%clockGroup == 17 { // the group's widest excess
				step = int64(uint64(1)<<(w-1) | uint64(i)%3)
			}
			tm += step // wraps past 63 bits, as at does
			c.add(tm)
			want = append(want, tm)
		}
		for i, v := range want {
			if got := c.at(i); got != v {
				t.Fatalf("width %d: at(%d) = %d, want %d", w, i, got, v)
			}
		}
	}
}
