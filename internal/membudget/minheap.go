package membudget

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync"
)

// A minimum heap. The collector's pacer starts a cycle when the heap has
// grown by GOGC percent over the live heap, and from at least 4 MB: a
// command that allocates a few tens of megabytes over its life collects
// several times, each cycle taking a quarter of the cores from work that
// runs on all of them (a sweep's replays). MinHeap moves the next goal up
// to a floor while the live heap is small, and leaves it where GOGC puts
// it once twice the live heap is above the floor, so a big trace's heap
// grows no more than it would have. The soft memory limit (Guard.Start)
// still wins over both.

// MinHeap makes each cycle's heap goal at least floor bytes, at the
// GOGC=100 pace above it, until the returned stop is called. Calls may
// overlap (commands run side by side in tests): the highest floor of those
// active holds, and the last stop restores the GOGC the first found. A
// caller honours a GOGC the user set by not calling it.
func MinHeap(floor uint64) (stop func()) {
	tune.mu.Lock()
	defer tune.mu.Unlock()
	tune.floors = append(tune.floors, floor)
	if len(tune.floors) == 1 {
		tune.old = debug.SetGCPercent(tune.percent(liveHeap()))
		tune.epoch++
		tune.arm(tune.epoch)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			tune.mu.Lock()
			defer tune.mu.Unlock()
			for i, f := range tune.floors {
				if f == floor {
					tune.floors = append(tune.floors[:i], tune.floors[i+1:]...)
					break
				}
			}
			if len(tune.floors) == 0 {
				debug.SetGCPercent(tune.old)
			}
		})
	}
}

// tuner sets GOGC after each collection, from a finalizer on an object
// that each cycle finds unreachable, while floors are active. A chain of
// finalizers belongs to one epoch: one left from an earlier activation
// ends at its next cycle.
type tuner struct {
	mu     sync.Mutex
	floors []uint64
	old    int
	epoch  int
}

var tune tuner

// sentinel is big enough not to be batched with other tiny objects, whose
// finalizers may never run.
type sentinel struct{ _ [16]byte }

func (t *tuner) arm(epoch int) {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if len(t.floors) == 0 || epoch != t.epoch {
			return
		}
		debug.SetGCPercent(t.percent(liveHeap()))
		t.arm(epoch)
	})
}

// percent is the GOGC that puts the next goal, live*(1+GOGC/100), at the
// floor; 100 where the GOGC=100 goal is above it. Before the first cycle
// (live 0) the pacer's goal is 4 MB*GOGC/100.
func (t *tuner) percent(live uint64) int {
	const minGoal = 4 << 20
	floor := slices.Max(t.floors)
	if live == 0 {
		return max(100, int(floor/minGoal*100))
	}
	if 2*live >= floor {
		return 100
	}
	return int(floor*100/live) - 100
}

// liveHeap is the heap the last collection found live, 0 before the first.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
