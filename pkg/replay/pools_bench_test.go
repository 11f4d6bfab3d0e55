package replay

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// repeatTrace is scripts/repeat_trace.py in memory: device 0's events of
// the fixture name, repeated until there are n; with shift each copy's
// addresses move past the last copy's, and the final segments are listed
// once for each copy (a program whose every copy of its pools stays
// alive), else every copy reuses the same addresses (a program whose
// pools die and are made again).
func repeatTrace(tb testing.TB, name string, n int, shift bool) ([]trace.Event, []trace.Segment, *trace.Snapshot) {
	snap, err := trace.Open(filepath.Join(fixtures, name))
	if err != nil {
		tb.Fatal(err)
	}
	ev := snap.Traces[0]
	final := deviceSegments(snap, 0)
	var span uint64
	if shift {
		lo, hi := ^uint64(0), uint64(0)
		for _, e := range ev {
			lo, hi = min(lo, e.Addr), max(hi, e.Addr)
		}
		for _, s := range final {
			lo, hi = min(lo, s.Address), max(hi, s.Address+s.TotalSize)
		}
		span = (hi - lo + 1<<30) >> 30 << 30
	}
	var out []trace.Event
	var segs []trace.Segment
	for r := uint64(0); len(out) < n; r++ {
		for _, e := range ev {
			e.Addr += r * span
			out = append(out, e)
		}
		if shift || r == 0 {
			for _, s := range final {
				s.Address += r * span
				segs = append(segs, s)
			}
		}
	}
	if !shift {
		segs = slices.Clone(final)
	}
	return out, segs, snap
}

// BenchmarkPoolWalk is pool inference (the walk of the block model,
// labelling, the plan of the pools) on traces with private pools repeated
// to growing lengths: graph_convnet's captured graphs, every copy alive
// at the end at addresses of its own (many pools alive at once), and
// mempool_single's, every copy at the same addresses. Its ns/event stays
// flat as the trace grows: the walk is linear in the events.
func BenchmarkPoolWalk(b *testing.B) {
	for _, c := range []struct {
		name  string
		shift bool
		sizes []int
	}{{"graph_convnet.pickle", true, []int{50_000, 200_000}}, {"mempool_single.pickle", false, []int{100_000, 400_000}}} {
		for _, n := range c.sizes {
			events, final, snap := repeatTrace(b, c.name, n, c.shift)
			cfg := settingsConfig(snap.Settings)
			b.Run(fmt.Sprintf("%s/%d", c.name[:len(c.name)-len(".pickle")], len(events)), func(b *testing.B) {
				for b.Loop() {
					if inferPools(events, final, cfg) == nil {
						b.Fatal("no pools inferred")
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
			})
		}
	}
}
