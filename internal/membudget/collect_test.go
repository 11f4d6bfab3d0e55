package membudget

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestWorthCollecting(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                string
		goal, objects, held uint64
		want                bool
	}{
		{"small heap", 4 * mib, 2 * mib, 2 * mib, false},
		{"small heap, far from its goal", 9 * mib, 5 * mib, 5 * mib, false},
		{"big heap, far from its goal", 16 * mib, 11 * mib, 12 * mib, true},
		{"big heap, its goal within the memory it holds", 12 * mib, 8 * mib, 12 * mib, false},
		{"big heap, its goal just past the memory it holds", 13 * mib, 8 * mib, 12 * mib, true},
	} {
		if got := worthCollecting(c.goal, c.objects, c.held); got != c.want {
			t.Errorf("%s: worthCollecting(goal %d MiB, objects %d MiB, held %d MiB) = %v, want %v",
				c.name, c.goal/mib, c.objects/mib, c.held/mib, got, c.want)
		}
	}
}

var live [][]byte

// TestCollect: Collect leaves a small heap to the pacer and collects a big
// one whose goal is far above it.
func TestCollect(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)

	runtime.GC()
	before := gcCycles()
	Collect()
	if n := gcCycles() - before; n != 0 {
		t.Errorf("Collect on a small heap ran %d collections, want none", n)
	}

	for range 32 * 16 {
		live = append(live, make([]byte, 64<<10)) // 32 MiB: the goal is 64 MiB
	}
	runtime.GC()
	before = gcCycles()
	Collect()
	live = nil
	if n := gcCycles() - before; n != 1 {
		t.Errorf("Collect on a 32 MiB heap ran %d collections, want 1", n)
	}
}

// A collection on one P leaves GOMAXPROCS as it found it, the runtime's
// default or a value set.
func TestCollectOnOnePRestores(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	collectOnOneP()
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Errorf("GOMAXPROCS %d after a collection, %d before", got, before)
	}
	defer runtime.GOMAXPROCS(before)
	runtime.GOMAXPROCS(before + 1)
	collectOnOneP()
	if got := runtime.GOMAXPROCS(0); got != before+1 {
		t.Errorf("GOMAXPROCS %d after a collection, %d set before", got, before+1)
	}
}
