package categories

import (
	"math"
	"testing"
)

// TestClock checks that every time comes back as given, across chunks,
// offsets that fit in 32 bits and those that do not (a long gap, a time
// going back), which turn their chunk wide.
func TestClock(t *testing.T) {
	var want []int64
	tm := int64(1_700_000_000_000_000)
	for i := range 3<<chunkBits + 5 {
		switch {
		case i == 70_000:
			tm += math.MaxUint32 + 1 // a gap past 32 bits
		case i == 2<<chunkBits+1:
			tm -= 5 // back in time
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
	wide := 0
	for _, ch := range c.chunks {
		if ch.wide != nil {
			wide++
		}
	}
	if wide != 2 {
		t.Errorf("%d wide chunks, want 2 (the gap's and the step back's)", wide)
	}
	for i, v := range want {
		if got := c.at(i); got != v {
			t.Fatalf("at(%d) = %d, want %d", i, got, v)
		}
	}
}
