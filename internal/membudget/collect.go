package membudget

import (
	"runtime"
	"runtime/metrics"
	"sync"
)

// Collecting at the end of a phase. A big trace's phases each leave tens
// of megabytes of working sets behind; collected at once, the next phase
// reuses their memory, where the pacer would let the heap grow to its
// goal, twice the heap the last cycle found live, first. But runtime.GC
// costs milliseconds of CPU even on a small heap (it stops the world
// twice, wakes the other cores' mark workers, and sweeps the whole heap
// one span at a time, yielding to the scheduler after each), and most
// traces are small: on one of a few thousand events the forced cycles
// were half the command's CPU.

// Thresholds of Collect: the least heap it collects, and the least memory
// the heap may take from the system on its way to the pacer's goal.
const (
	collectHeap   = 6 << 20
	collectGrowth = 1 << 20
)

// Collect runs a collection now (runtime.GC) where that can keep the
// process from taking more memory from the system than it does without:
// where the heap holds at least collectHeap of objects, live or dead, and
// its growth to the pacer's goal could take collectGrowth or more beyond
// the memory the heap holds already (its objects and its free pages not
// returned to the system; the unused ends of its spans are left out, as
// only objects of their own size fit there). Elsewhere the runtime
// collects by itself soon enough.
func Collect() {
	s := []metrics.Sample{
		{Name: "/gc/heap/goal:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	metrics.Read(s)
	for _, x := range s {
		if x.Value.Kind() != metrics.KindUint64 {
			runtime.GC() // a runtime without these metrics: collect as before
			return
		}
	}
	objects := s[1].Value.Uint64()
	if worthCollecting(s[0].Value.Uint64(), objects, objects+s[2].Value.Uint64()) {
		collectOnOneP()
	}
}

// collecting makes collectOnOneP's calls take turns, so that each
// restores the GOMAXPROCS it found.
var collecting sync.Mutex

// collectOnOneP is runtime.GC with GOMAXPROCS 1 while it runs. After its
// mark, runtime.GC sweeps the whole heap itself, one span at a time, and
// yields after each (Gosched), and each yield wakes an idle P's thread to
// take the goroutine over (wakep): a context switch or two per span, a
// few thousand on a heap of tens of megabytes. With one P none is idle.
// The mark has that P to itself while the caller waits, as it would have
// had the others; other goroutines (a sweep's replays) wait for the
// collection. GOMAXPROCS then goes back to the runtime's default, which
// follows the CPU limit as before (a value set by runtime.GOMAXPROCS
// would not), or to what it was where that differs (the GOMAXPROCS
// variable, a test's -cpu).
func collectOnOneP() {
	collecting.Lock()
	defer collecting.Unlock()
	old := runtime.GOMAXPROCS(1)
	runtime.GC()
	runtime.SetDefaultGOMAXPROCS()
	if runtime.GOMAXPROCS(0) != old {
		runtime.GOMAXPROCS(old)
	}
}

// worthCollecting says whether a heap of objects bytes, holding held
// bytes of memory, is worth collecting on the way to goal.
func worthCollecting(goal, objects, held uint64) bool {
	return objects >= collectHeap && goal >= held+collectGrowth
}
