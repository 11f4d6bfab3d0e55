package replay

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gpumem/gpumem/pkg/trace"
)

// BenchmarkRunBigTrace is Run alone (the replay, with a timeline as the
// CLI keeps one, and its placement check) on a streamed plan of the trace
// GPUMEM_BIG_TRACE names (make one with scripts/gen_trace.py): the
// allocator and the op log's unpacking, without the decoder and planner.
func BenchmarkRunBigTrace(b *testing.B) {
	path := os.Getenv("GPUMEM_BIG_TRACE")
	if path == "" {
		b.Skip("set GPUMEM_BIG_TRACE to a snapshot pickle (make one with scripts/gen_trace.py)")
	}
	snap, err := trace.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	pl := NewPlanner()
	for i := range snap.Traces[0] {
		pl.Add(&snap.Traces[0][i])
	}
	p := pl.Plan(snap)
	if p == nil || p.log == nil {
		b.Fatalf("no streamed plan: %s", pl.Declined())
	}
	snap = nil
	checked := false
	cpu0 := cpuTime()
	for b.Loop() {
		r, err := Run(p, Options{Points: 2000})
		if err != nil {
			b.Fatal(err)
		}
		checked = r.Addressing != nil && r.Addressing.ModelledFrom >= 0
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*p.Len()), "ns/op")
	// the process's CPU time: on a busy machine, steadier than the clock
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*p.Len()), "cpu-ns/op")
	if !checked {
		b.Log("the placement check did not run")
	}
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
