package categories

import (
	"reflect"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/pkg/trace"
)

// openEvents is a trace with the cases the open blocks distinguish: an
// address reused, allocated twice while live, freed before the trace saw
// it allocated, freed in two halves, and blocks live at the end, one of
// them at an address the trace never allocated.
func openEvents() []trace.Event {
	ev := func(a trace.Action, addr uint64) trace.Event {
		return trace.Event{Action: a, Addr: addr, Size: 1 << 20, Stack: -1, TimeUS: int64(addr >> 20)}
	}
	A, B, C, D := uint64(1<<20), uint64(2<<20), uint64(3<<20), uint64(4<<20)
	return []trace.Event{
		ev(trace.ActionAlloc, A), ev(trace.ActionAlloc, B),
		ev(trace.ActionFreeRequested, A), ev(trace.ActionFreeCompleted, A),
		ev(trace.ActionAlloc, A), ev(trace.ActionAlloc, A), // a second alloc at a live address
		ev(trace.ActionFreeRequested, D), ev(trace.ActionFreeCompleted, D), // freed before the trace saw it
		ev(trace.ActionFreeRequested, B), ev(trace.ActionAlloc, C), ev(trace.ActionFreeCompleted, B),
		ev(trace.ActionFreeCompleted, C), // its free_requested not in the trace: C stays open
	}
}

// opens is what a planner hands AddOpen for events (see AddOpen) and
// EndOpen at their end.
func opens(events []trace.Event) ([]int32, []uint64) {
	open := make([]int32, len(events))
	at := map[uint64]int32{}
	var allocs int32
	for k, e := range events {
		switch e.Action {
		case trace.ActionAlloc:
			open[k] = at[e.Addr]
			allocs++
			at[e.Addr] = allocs
		case trace.ActionFreeRequested:
			open[k] = at[e.Addr]
			at[e.Addr] = 0
		}
	}
	var end []uint64
	for addr, o := range at {
		if o > 0 {
			end = append(end, addr)
		}
	}
	slices.Sort(end)
	return open, end
}

// A builder given the open blocks classifies as one that looks them up.
func TestAddOpenIsAdd(t *testing.T) {
	events := openEvents()
	blocks := []trace.Block{{Address: 1 << 20, Size: 1 << 20, State: trace.BlockAllocated, Stack: -1},
		{Address: 3 << 20, Size: 1 << 20, State: trace.BlockAllocated, Stack: -1},
		{Address: 5 << 20, Size: 1 << 20, State: trace.BlockAllocated, Stack: -1}} // never allocated in the trace
	snap := &trace.Snapshot{Segments: []trace.Segment{{Address: 1 << 20, TotalSize: 5 << 20, Stack: -1, Blocks: blocks}}}
	want := NewBuilder()
	want.Add(events)
	open, end := opens(events)
	got := NewBuilder()
	for i := 0; i < len(events); i += 5 { // a few events at a time, as a planner's window hands them
		j := min(i+5, len(events))
		got.AddOpen(events[i:j], open[i:j])
	}
	got.EndOpen(end)
	w, g := want.Result(snap, 0), got.Result(snap, 0)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("given the open blocks:\n got %+v\nwant %+v", g, w)
	}
	if len(w.head) != 2 {
		t.Errorf("%d blocks live before the trace, want 2 (one freed, one alive at the end)", len(w.head))
	}
}
