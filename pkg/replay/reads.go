package replay

import (
	"errors"
	"slices"

	"github.com/gpumem/gpumem/internal/membudget"
	"github.com/gpumem/gpumem/pkg/trace"
)

// A snapshot file can be planned as it is read, keeping no event: a big
// trace then needs memory for its live blocks and packed operations alone,
// a few bytes an event. PlanReads decides how many reads a trace needs,
// the one place that choice is made:
//
//  1. one read, a Planner: a trace that starts with the program and has
//     no segment events;
//  2. else two, a StartState then NewSnapshotPlanner: segment events, or a
//     ring buffer's cut, need the trace's end state and peak before its
//     first event is planned. Only the first of them reads the file: it
//     keeps a tape of the events (a few bytes each), which a walk for the
//     evidence of private pools (showsPools) reads, then the second;
//  3. else, for a trace that used private pools (their inference labels
//     allocations from what happened later), two more passes over the
//     tape: a PoolWalk (12 bytes an alloc event and a bit an event) then
//     NewPoolPlanner;
//  4. else none: the caller reads the file whole (FromSnapshot).

// A Reader reads the snapshot file once more from its start, handing sink
// each event and final segment, and returns the snapshot without its
// events and, per device, the index of its event list (-1: none). phase
// names the read, for a progress bar. A sink's ErrDeclined stops the read
// and comes back as its error.
type Reader func(phase string, sink trace.PickleSink) (*trace.Snapshot, []int, error)

// A Watch sees the events of a planning read as they are planned.
// Events gets a list's next events, in order, as many at a time as a
// planner's window holds, and, for each alloc and free_requested event,
// the block open at its address before it: 1 + the index among the
// list's alloc events of the last alloc there, 0 when there was none or
// a free_requested of the address followed it (open's other entries mean
// nothing). End gets, once a list's trace is planned, the addresses where
// a block is open at its end, in order.
type Watch struct {
	Events func(list int, events []trace.Event, open []int32)
	End    func(list int, open []uint64)
}

// ErrDeclined stops a read whose trace cannot be planned as it streams.
var ErrDeclined = errors.New("the trace cannot be planned as it is read")

// PlanReads plans each device's trace of a snapshot file, reading it with
// read as few times as the traces need (see above). watch, when not nil,
// is called before each read that plans and returns what sees its
// events: what the caller derives from the events, beside the plan,
// comes from the last such read. ok is false when
// the file must be read whole (a planner declined every way, or a read
// failed: reading it whole reports why). lists are the devices' list
// indexes, as the Reader returns them.
func PlanReads(read Reader, watch func() Watch) (snap *trace.Snapshot, plans []*Plan, lists []int, ok bool) {
	snap, plans, lists, err := planOnce(read, watch)
	if err == nil {
		return snap, plans, lists, true
	}
	if !errors.Is(err, ErrDeclined) {
		return nil, nil, nil, false // not a pickle, a bad file, an interrupt
	}
	// the one read of the file: the start state, and a tape of the events
	// for the passes that plan them
	var starts []*StartState
	var tapes []*tape
	defer func() { // those no pass let go (a read that failed, a list of no device)
		for _, t := range tapes {
			t.free()
		}
	}()
	first, lists, err := read("finding the start state of", trace.PickleSink{
		// a run of events a call: one call from the decoder a run, not
		// one an event
		Events: func(list int, evs []trace.Event) error {
			if list == len(starts) {
				starts = append(starts, NewStartState())
				tapes = append(tapes, &tape{})
			}
			st, tp := starts[list], tapes[list]
			for i := range evs {
				st.Add(&evs[i])
				tp.add(&evs[i])
			}
			return nil
		},
	})
	if err != nil {
		return nil, nil, nil, false
	}
	// whether the traces used private pools, before a planner is made: a
	// trace's planner then plans with its pools, or without
	listed := make([]bool, len(starts))
	pools := false
	for d, l := range lists {
		if l >= 0 {
			listed[l] = true
			pools = pools || starts[l].poolSegment(first, d) || showsPools(first, d, tapes[l])
		}
	}
	if slices.Contains(listed, false) {
		return nil, nil, nil, false // a list of no device: reading it whole reports it
	}
	planners := make([]*Planner, len(starts))
	if !pools {
		// no private pools: snapshot planners plan the traces, letting the
		// tapes go as they read them, with no walk for pools (NewSnapshotPlanner's,
		// which showsPools made)
		for d, l := range lists {
			if l >= 0 {
				planners[l] = newSnapshotPlanner(first, d, starts[l])
			}
		}
		plans, err := planTapes(first, watch, lists, planners, tapes, true)
		if err != nil {
			return nil, nil, nil, false
		}
		return first, plans, lists, true
	}
	// private pools: walk each trace for them, then plan with them
	for d, l := range lists {
		if l >= 0 {
			tp := tapes[l]
			w := NewPoolWalk(first, d, starts[l], tp.eachRun)
			planners[l] = NewPoolPlanner(first, d, starts[l], w)
			starts[l] = nil // its per-event records are no longer needed
		}
	}
	// The walks' block models are garbage now, the largest thing on the heap
	// but the tapes: collected at once on a big heap (membudget.Collect),
	// the plans reuse their memory instead of growing the heap to the
	// pacer's goal, twice the walks'.
	membudget.Collect()
	plans, err = planTapes(first, watch, lists, planners, tapes, true)
	if err != nil {
		return nil, nil, nil, false
	}
	return first, plans, lists, true
}

// planOnce plans in one read the traces that start with the program and
// have no segment events; ErrDeclined when a planner declines.
func planOnce(read Reader, watch func() Watch) (*trace.Snapshot, []*Plan, []int, error) {
	var planners []*Planner
	w := watching(watch)
	snap, lists, err := read("reading", trace.PickleSink{
		// a run of events a call: the planner copies them in bulk
		Events: func(list int, evs []trace.Event) error {
			if list == len(planners) {
				planners = append(planners, NewPlanner())
				planners[list].watched(w, list)
			}
			pl := planners[list]
			pl.AddAll(evs)
			if pl.Declined() != "" {
				return ErrDeclined
			}
			return nil
		},
		// the end state a replay is checked against needs the whole
		// trace: the start state's read takes it first
		Segment: func(*trace.Segment) error { return ErrDeclined },
	})
	if err != nil {
		return nil, nil, nil, err
	}
	snap, plans, err := finishPlans(snap, lists, planners)
	return snap, plans, lists, err
}

// showsPools walks device's trace of snap, on tape, for the evidence of
// private pools a snapshot planner looks for as it plans (the walk with
// which it declines the trace), before the planner reads the tape: a
// trace that shows none is then planned in one pass that lets the tape
// go, one that does is walked for its pools at once. A trace with
// expandable segments shows none: pools are not modelled there.
func showsPools(snap *trace.Snapshot, device int, tp *tape) bool {
	f := newInferer(settingsConfig(snap.Settings))
	w := window{win: make([]trace.Event, 0, plannerWindow)}
	mapped, done := false, errors.New("done")
	err := tp.each(false, func(e *trace.Event) error {
		if e.Action == trace.ActionSegmentMap || e.Action == trace.ActionSegmentUnmap {
			mapped = true
			return done
		}
		w.win = append(w.win, *e)
		if len(w.win) == cap(w.win) {
			w.slide(w.stepReady(false, f.step), true)
			if f.anyApart { // an exclusion: evidence whatever follows
				return done
			}
		}
		return nil
	})
	switch {
	case mapped:
		return false
	case err != nil:
		return true
	}
	w.slide(w.stepReady(true, f.step), true)
	return f.anyApart || f.evidence(deviceSegments(snap, device)) != nil
}

// planTapes plans each device's trace from its tape with its planner
// (letting the tapes go as they are read with drop); ErrDeclined when a
// planner declines.
func planTapes(snap *trace.Snapshot, watch func() Watch, lists []int, planners []*Planner, tapes []*tape, drop bool) ([]*Plan, error) {
	w := watching(watch)
	for l, pl := range planners {
		pl.watched(w, l)
		if pl.addTape(tapes[l].reader(drop)); pl.Declined() != "" {
			return nil, ErrDeclined
		}
	}
	_, plans, err := finishPlans(snap, lists, planners)
	return plans, err
}

// finishPlans ends each device's planner; ErrDeclined when one declines
// now that it sees the snapshot.
func finishPlans(snap *trace.Snapshot, lists []int, planners []*Planner) (*trace.Snapshot, []*Plan, error) {
	plans := make([]*Plan, len(lists))
	for d, l := range lists {
		if l < 0 {
			continue
		}
		if plans[d] = planners[l].Plan(snap); plans[d] == nil {
			return nil, nil, ErrDeclined
		}
	}
	return snap, plans, nil
}

// watching is a planning read's watch (none when watch is nil).
func watching(watch func() Watch) Watch {
	if watch == nil {
		return Watch{}
	}
	return watch()
}
