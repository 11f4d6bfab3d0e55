package replay

import (
	"github.com/gpumem/gpumem/internal/membudget"
	"github.com/gpumem/gpumem/pkg/trace"
)

// PoolWalk walks one device's trace of a snapshot, an event at a time,
// for the private pools its plan needs (a CUDA graph's, a
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
	events func(see func(evs []trace.Event))
	run    []trace.Event // a release run's events, its room kept between walks
	mapped bool          // expandable segments: pools are not modelled there
	final  []trace.Segment
	// last: the last segment event at an address (see inferer.predict),
	// as the start state saw it
	last func(addr uint64) (int, bool)
}

// NewPoolWalk starts the walk of device's trace of snap: events hands see
// all of its events in order, a run at a time, each time it is called;
// snap gives its final segments and settings, st (which read it) its
// length.
func NewPoolWalk(snap *trace.Snapshot, device int, st *StartState, events func(see func(evs []trace.Event))) *PoolWalk {
	w := &PoolWalk{f: newInferer(settingsConfig(snap.Settings)), events: events,
		final: deviceSegments(snap, device)}
	w.f.keepRecords(st.events, st.allocs, st.segAllocs)
	w.mapped = st.paged
	w.last = func(addr uint64) (int, bool) {
		f, ok := st.segs.Get(addr)
		return int(f.last), ok
	}
	return w
}

// walkAll walks every event with f as it comes (streamWalk), not a
// window at a time: a window costs a copy of every event and a second
// loop over it, for the few events whose step waits on the next.
func (w *PoolWalk) walkAll(f *inferer, record bool) {
	s := streamWalk{run: w.run[:0]}
	w.events(func(evs []trace.Event) {
		if record {
			for i := range evs {
				f.record(&evs[i])
				s.feed(f, &evs[i])
			}
			return
		}
		for i := range evs {
			s.feed(f, &evs[i])
		}
	})
	s.end(f)
	w.run = s.run[:0]
}

// streamWalk steps a walk's events one at a time, as they come: what
// step reads of the events beside one is kept here, and an event whose
// step waits on the next (a segment_alloc, the size class of its first
// request; a release run, its end) waits here until it comes. The order
// of the steps is step's over the whole trace.
type streamWalk struct {
	n int // the trace index of the next event
	// the action and address of the event before it (an alloc right
	// after its segment_alloc made it)
	prevAction trace.Action
	prevAddr   uint64
	// seg: the segment_alloc before it (prevAction), waiting for it
	seg trace.Event
	// run: a release run waiting for its end, from its first event's
	// index
	run     []trace.Event
	runFrom int
}

// feed steps what waited on e, then e, or keeps it waiting.
func (s *streamWalk) feed(f *inferer, e *trace.Event) {
	if len(s.run) > 0 && e.Action != trace.ActionSegmentFree {
		f.release(s.run, s.runFrom)
		s.run = s.run[:0]
	}
	if s.n > 0 && s.prevAction == trace.ActionSegmentAlloc {
		f.segmentAlloc(&s.seg, s.n-1, e)
	}
	switch e.Action {
	case trace.ActionSegmentAlloc:
		// the fields the step reads, one by one (see walkAll)
		s.seg.Action, s.seg.Addr, s.seg.Size, s.seg.Stream = e.Action, e.Addr, e.Size, e.Stream
	case trace.ActionSegmentFree:
		if len(s.run) == 0 {
			s.runFrom = s.n
		}
		s.run = append(s.run, trace.Event{Action: e.Action, Addr: e.Addr})
	case trace.ActionAlloc:
		f.alloc(s.n, e, s.n > 0 && s.prevAction == trace.ActionSegmentAlloc && s.prevAddr == e.Addr)
		f.nAllocs++
	case trace.ActionFreeCompleted:
		f.freeAt(e.Addr)
	}
	s.prevAction, s.prevAddr = e.Action, e.Addr
	s.n++
}

// end steps what still waits at the end of the trace.
func (s *streamWalk) end(f *inferer) {
	if len(s.run) > 0 {
		f.release(s.run, s.runFrom)
		s.run = s.run[:0]
	}
	if s.n > 0 && s.prevAction == trace.ActionSegmentAlloc {
		f.segmentAlloc(&s.seg, s.n-1, nil)
	}
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
	w.f, w.run, w.events, w.last = nil, nil, nil, nil
	return pp
}
