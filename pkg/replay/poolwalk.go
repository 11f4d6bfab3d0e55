package replay

import (
	"github.com/gpumem/gpumem/internal/membudget"
	"github.com/gpumem/gpumem/pkg/trace"
)

// PoolWalk walks one device's trace of a snapshot, a window of events at
// a time, for the private pools its plan needs (a CUDA graph's, a
// torch.cuda.MemPool's): it walks the block model inferPools walks, keeping
// per alloc event a packed record (eventRecord), its index and the segment
// it allocated in (12 bytes), and per event whether it claimed its block
// (a bit), not the events. A snapshot planner declines a trace that used
// private pools; the trace is then planned in more passes over its tape:
// this walk's (the walk, the segments the final snapshot names known from
// the start state's read, and for a trace whose allocations may have
// passed over their own pool's blocks, a walk again), and
// NewPoolPlanner's with the pools it found.
type PoolWalk struct {
	f      *inferer
	events func(see func(e *trace.Event) error)
	window
	mapped bool // expandable segments: pools are not modelled there
	final  []trace.Segment
	// last: the last segment event at an address (see inferer.predict),
	// as the start state saw it
	last func(addr uint64) (int, bool)
}

// NewPoolWalk starts the walk of device's trace of snap: events hands see
// each of its events in order, each time it is called; snap gives its
// final segments and settings, st (which read it) its length.
func NewPoolWalk(snap *trace.Snapshot, device int, st *StartState, events func(see func(e *trace.Event) error)) *PoolWalk {
	w := &PoolWalk{f: newInferer(settingsConfig(snap.Settings)), events: events, window: window{win: make([]trace.Event, 0, plannerWindow)},
		final: deviceSegments(snap, device)}
	w.f.keepRecords(st.events, st.allocs, st.segAllocs)
	w.mapped = st.paged
	w.last = func(addr uint64) (int, bool) {
		f, ok := st.segs[addr]
		return int(f.last), ok
	}
	return w
}

// walkAll walks every event with f, a window at a time.
func (w *PoolWalk) walkAll(f *inferer, record bool) {
	w.win, w.done, w.base = w.win[:0], 0, 0
	w.events(func(e *trace.Event) error {
		if record {
			f.record(e)
		}
		// field by field: e was just written so, and a copy of the whole
		// event reads it 16 bytes at a time, each read spanning fields
		// written apart, which waits for the writes to reach the cache
		// (a failed store-to-load forward: most of the callback's cycles)
		if n := len(w.win); n < cap(w.win) {
			w.win = w.win[:n+1]
		} else { // a release run as long as the window: it grows
			w.win = append(w.win, trace.Event{})
		}
		d := &w.win[len(w.win)-1]
		d.Action, d.Stack, d.Addr, d.Size, d.Stream, d.TimeUS = e.Action, e.Stack, e.Addr, e.Size, e.Stream, e.TimeUS
		if len(w.win) == cap(w.win) {
			w.slide(w.stepAll(f, false), true)
		}
		return nil
	})
	w.slide(w.stepAll(f, true), true)
}

// stepAll is stepReady with f's step: called directly, not through a
// method value, for the walk's every event.
func (w *PoolWalk) stepAll(f *inferer, end bool) int {
	i, lim := w.done, w.ready(end)
	for i < lim {
		i = f.step(w.win, i, w.base) + 1
	}
	return i
}

// pools walks the trace and returns its pools' plan: nil when it shows no
// private pool (or has expandable segments, where pools are not modelled).
func (w *PoolWalk) pools() *poolPlan {
	f := w.f
	f.predict(w.final, w.last)
	if w.mapped {
		return nil // as inferPools: no pools
	}
	w.walkAll(f, true)
	f.again = func(g *inferer) { w.walkAll(g, false) }
	// The walk's garbage (the old arrays of the lists it grew, among others)
	// is collected at once on a big heap (membudget.Collect): labelling's
	// working sets reuse its memory instead of growing the heap on top of it
	// to the pacer's goal, twice the records.
	membudget.Collect()
	pp := f.poolPlan(w.final)
	w.f, w.win, w.events, w.last = nil, nil, nil, nil
	return pp
}
