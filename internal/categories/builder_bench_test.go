package categories

import (
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// BenchmarkBuilder is what a Builder costs a streamed replay: a million
// events (allocs, their free_requested and free_completed, some blocks
// kept a while) taken one by one, then classified.
func BenchmarkBuilder(b *testing.B) {
	var events []trace.Event
	tm := int64(1_700_000_000_000_000)
	var live, free []uint64 // addresses are reused, last freed first, as a caching allocator does
	next := uint64(0x7f0000000000)
	for len(events) < 1_000_000 {
		tm += 3
		if len(live) < 100 || len(events)%7 < 4 {
			a := next
			if len(free) > 0 {
				a, free = free[len(free)-1], free[:len(free)-1]
			} else {
				next += 1 << 20
			}
			live = append(live, a)
			events = append(events, trace.Event{Action: trace.ActionAlloc, Addr: a, Size: 1 << 16, Stack: -1, TimeUS: tm})
			continue
		}
		a := live[len(events)%len(live)]
		live[len(events)%len(live)] = live[len(live)-1]
		live = live[:len(live)-1]
		free = append(free, a)
		events = append(events, trace.Event{Action: trace.ActionFreeRequested, Addr: a, Size: 1 << 16, Stack: -1, TimeUS: tm},
			trace.Event{Action: trace.ActionFreeCompleted, Addr: a, Size: 1 << 16, Stack: -1, TimeUS: tm + 1})
	}
	snap := &trace.Snapshot{}
	b.ReportAllocs()
	for b.Loop() {
		bl := NewBuilder()
		bl.Add(events)
		bl.Result(snap, 0)
	}
}
