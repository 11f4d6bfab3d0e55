package membudget

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

func TestMinHeapPercent(t *testing.T) {
	const mib = 1 << 20
	tu := &tuner{floors: []uint64{16 * mib, 64 * mib}}
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 1600},       // before the first cycle: 4 MB × 16 = 64 MiB
		{8 * mib, 700},  // 8 MiB × 8
		{16 * mib, 300}, // 16 MiB × 4
		{32 * mib, 100}, // twice the live heap reaches the floor
		{1 << 30, 100},
	} {
		if got := tu.percent(c.live); got != c.want {
			t.Errorf("percent(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
}

func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink []byte

// churn allocates n bytes of garbage in 64 KiB pieces and returns the
// collections that ran meanwhile.
func churn(n int) uint64 {
	before := gcCycles()
	for range n / (64 << 10) {
		sink = make([]byte, 64<<10)
	}
	sink = nil
	return gcCycles() - before
}

// TestMinHeapCollectsLess: with a floor far above the garbage made, a
// command that allocates a few tens of megabytes collects at most once
// (a cycle may be under way), where it collects several times without
// (there over four times the garbage: on a loaded machine the pacer's
// cycles stretch, and 48 MiB saw as few as 2); stop puts GOGC back.
func TestMinHeapCollectsLess(t *testing.T) {
	runtime.GC()
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	without := churn(192 << 20)

	runtime.GC()
	stop := MinHeap(512 << 20)
	with := churn(48 << 20)
	stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("after stop GOGC is %d, want the 100 it found", got)
	}
	if without < 3 || with > 1 {
		t.Errorf("collections: %d while allocating 192 MiB without a floor, %d while allocating 48 MiB with a 512 MiB floor; want 3 or more and at most 1", without, with)
	}
}

// TestMinHeapOverlapping: the last of overlapping stops restores GOGC,
// whatever the order.
func TestMinHeapOverlapping(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	a, b := MinHeap(64<<20), MinHeap(128<<20)
	a()
	a() // a second call does nothing
	if got := debug.SetGCPercent(-1); got == 100 {
		t.Errorf("GOGC back to 100 while a floor is still active")
	}
	debug.SetGCPercent(700)
	b()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("after the last stop GOGC is %d, want the 100 the first call found", got)
	}
}
