package replay

import (
	"github.com/gpumem/gpumem/pkg/trace"
)

// PoolWalk reads one device's trace of a snapshot, an event at a time, for
// the private pools its plan needs (a CUDA graph's, a torch.cuda.MemPool's):
// it walks the block model inferPools walks, keeping per event a packed
// record (eventRecord), the segment the event allocated in and whether it claimed
// its block: 9 bytes an event, not the event. A snapshot planner declines a
// trace that used private pools; the trace is then planned in two more
// passes over its tape: this one, and NewPoolPlanner's with the pools it
// found.
type PoolWalk struct {
	f *inferer
	window
	mapped bool // expandable segments: pools are not modelled there
	final  []trace.Segment
}

// NewPoolWalk starts the walk of device's trace of snap, read once
// already: snap gives its final segments and settings, st (which read
// it) its length.
func NewPoolWalk(snap *trace.Snapshot, device int, st *StartState) *PoolWalk {
	w := &PoolWalk{f: newInferer(settingsConfig(snap.Settings)), window: window{win: make([]trace.Event, 0, plannerWindow)},
		final: deviceSegments(snap, device)}
	w.f.keepRecords(st.events)
	return w
}

// Add walks the next event of the trace.
func (w *PoolWalk) Add(e *trace.Event) {
	if w.mapped {
		return
	}
	if e.Action == trace.ActionSegmentMap || e.Action == trace.ActionSegmentUnmap {
		w.mapped, w.f, w.win = true, nil, nil // as inferPools: no pools
		return
	}
	w.f.record(e)
	w.win = append(w.win, *e)
	if len(w.win) == cap(w.win) {
		w.walk(false)
	}
}

// walk walks the window's events, all of them at the end of the trace,
// else all but those whose walk depends on the next event.
func (w *PoolWalk) walk(end bool) {
	w.slide(w.stepReady(end, w.f.step), true)
}

// pools ends the trace and returns its pools' plan: nil when it shows no
// private pool (or has expandable segments, where pools are not modelled).
func (w *PoolWalk) pools() *poolPlan {
	if w.mapped {
		return nil
	}
	w.walk(true)
	pp := w.f.poolPlan(w.final)
	w.f, w.win = nil, nil
	return pp
}
