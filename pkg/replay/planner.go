package replay

import (
	"slices"

	"github.com/gpumem/gpumem/internal/addrmap"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// Planner plans one device's trace from its events as they are read, in
// memory that does not grow with the trace beyond a few bytes per
// operation: the plan's operations are packed (opLog) and no event is
// kept. It gives the plan FromSnapshot would, but only for traces whose
// plan needs nothing from their future or their end state: traces that
// start before the program allocated (no block freed before the trace
// allocates it) and have no segment events, so that there are no seeds
// to rebuild, no private pools to infer and no release runs to judge
// against the trace's peak. For any other trace it declines (Declined
// says why) and the caller plans the whole trace with FromSnapshot.
type Planner struct {
	b builder
	window
	why string
	// snap is set for a planner of a whole snapshot (NewSnapshotPlanner),
	// which plans traces with segment events
	snap   *trace.Snapshot
	device int
	walk   *inferer // looks for private pools, nil once expandable segments show
	netSeg int64    // reserved bytes the segment events added
	// afterDevice: the last event read was a device event
	afterDevice bool
	// gc is the cap's garbage collection watch (nil without one), gcFree
	// what it counted before each event the plan's Recorded keeps (device
	// events and those right after them, all that inferCap reads but for
	// the watch)
	gc     *gcWatch
	gcFree []int32
	// see, when not nil, sees the events as they are planned, a window
	// at a time, with their open blocks (b.opens, by index in win): seen
	// of win's have been seen; seeEnd sees the addresses open at the end
	see    func(events []trace.Event, open []int32)
	seeEnd func(open []uint64)
	seen   int
}

// plannerWindow is how many events a Planner gathers before it plans them.
const plannerWindow = 4096

// window is the part of a trace a streamed read holds: the events read
// and not yet stepped (planned or walked), after the stepped ones kept.
type window struct {
	win  []trace.Event
	done int // stepped events kept at the start of win: 0, or 1 a walk looks back at
	base int // the trace index of win[0]
}

// stepReady steps the window's events with step (which returns the index
// of the last event it used), all of them at the end of the trace, else
// all but those whose step depends on the next event: the event after a
// free_requested or a segment_alloc, the rest of a release run. It
// returns the index of the first event not stepped.
func (w *window) stepReady(end bool, step func(ev []trace.Event, i, base int) int) int {
	i, lim := w.done, w.ready(end)
	for i < lim {
		i = step(w.win, i, w.base) + 1
	}
	return i
}

// ready is the index at which stepReady stops stepping: the end of the
// window at the end of the trace, else its last event or, when earlier,
// the start of the run of segment releases that reaches its end (the
// event after the run decides it).
func (w *window) ready(end bool) int {
	n := len(w.win)
	if end {
		return n
	}
	r := n
	for r > 0 && (w.win[r-1].Action == trace.ActionSegmentFree || w.win[r-1].Action == trace.ActionSegmentUnmap) {
		r--
	}
	return min(n-1, r)
}

// slide drops the events before i, keeping the last of them when
// lookBack (a walk looks back at the event before the one it steps).
func (w *window) slide(i int, lookBack bool) {
	keep := 0
	if i > 0 && lookBack {
		keep = 1
	}
	n := copy(w.win, w.win[i-keep:])
	w.win = w.win[:n]
	w.base += i - keep
	w.done = keep
}

// watched hands the planner's events to w's list.
func (pl *Planner) watched(w Watch, list int) {
	if w.Events == nil {
		return
	}
	pl.see = func(events []trace.Event, open []int32) { w.Events(list, events, open) }
	if w.End != nil {
		pl.seeEnd = func(open []uint64) { w.End(list, open) }
	}
}

// NewPlanner starts the plan of one device's trace.
func NewPlanner() *Planner {
	pl := &Planner{window: window{win: make([]trace.Event, 0, plannerWindow)}}
	p := newPlan()
	p.log = &opLog{} // the builder packs each op as it plans it
	pl.b = builder{p: p, cfg: alloc.DefaultConfig()}
	return pl
}

// Declined says why the trace read so far cannot be planned as it
// streams; "" while it can.
func (pl *Planner) Declined() string { return pl.why }

// Add plans the next event of the trace.
func (pl *Planner) Add(e *trace.Event) {
	if pl.why != "" {
		return
	}
	if pl.snap != nil {
		pl.addDevice(e)
	} else if isSegment(e.Action) {
		pl.why = "the trace has segment events"
		return
	}
	// copied field by field: the decoder has just written e a word at a
	// time, and a copy in wider moves would wait on those stores (a
	// store-to-load forward fails when a load spans two stores)
	n := len(pl.win)
	if n == cap(pl.win) { // a window none of which could be planned yet
		pl.win = slices.Grow(pl.win, 1)
	}
	pl.win = pl.win[:n+1]
	w := &pl.win[n]
	w.Action, w.Stack, w.Addr, w.Size, w.Stream, w.TimeUS = e.Action, e.Stack, e.Addr, e.Size, e.Stream, e.TimeUS
	if n+1 == cap(pl.win) {
		pl.plan(false)
	}
}

// addTape plans the events r reads, as Add does one at a time, read
// straight into the window (fill). It stops at the end of the tape or
// once the planner declines.
func (pl *Planner) addTape(r *tapeReader) { pl.fill(r.read) }

// fill plans the events read hands it, as Add would one at a time: read
// fills dst, the window's room, with the next events and says how many
// (0: no more), and they are planned where they lie once the window is
// full. It stops at the end or once the planner declines.
func (pl *Planner) fill(read func(dst []trace.Event) int) {
	for pl.why == "" {
		n := len(pl.win)
		if n == cap(pl.win) { // a window none of which could be planned yet
			pl.win = slices.Grow(pl.win, 1)
		}
		m := read(pl.win[n:cap(pl.win)])
		if m == 0 {
			return
		}
		evs := pl.win[n : n+m]
		if pl.snap != nil {
			for i := range evs {
				pl.addDevice(&evs[i])
			}
		} else {
			// Add's test for segment events, as one test of the set of
			// the run's actions
			var actions uint32
			for i := range evs {
				actions |= 1 << (evs[i].Action & 31)
			}
			if actions&segmentActions != 0 {
				pl.why = "the trace has segment events"
				return
			}
		}
		pl.win = pl.win[:n+m]
		if len(pl.win) == cap(pl.win) {
			pl.plan(false)
		}
	}
}

// segmentActions is the set of segment events' actions, a bit each.
const segmentActions = 1<<trace.ActionSegmentAlloc | 1<<trace.ActionSegmentFree | 1<<trace.ActionSegmentMap | 1<<trace.ActionSegmentUnmap

// AddAll plans the next events of the trace, as Add does one at a time:
// they are copied into the window in bulk, up to where it is full, and
// planned there as Add would have planned them.
func (pl *Planner) AddAll(evs []trace.Event) {
	if pl.snap == nil && len(pl.win) <= 1 { // (none but the event held back)
		for len(evs) > plannerWindow-1 && pl.why == "" {
			pl.addDirect(evs[:plannerWindow-1])
			evs = evs[plannerWindow-1:]
		}
		pl.addDirect(evs)
		return
	}
	pl.fill(func(dst []trace.Event) int {
		m := copy(dst, evs)
		evs = evs[m:]
		return m
	})
}

// addDirect is AddAll planning evs (fewer than plannerWindow) where they
// lie, not copied into the window: all but the last, whose plan may
// depend on the next event, held back in the window (the only event it
// then holds) for the next call or Plan.
func (pl *Planner) addDirect(evs []trace.Event) {
	if len(evs) == 0 || pl.why != "" {
		return
	}
	b, i := &pl.b, 0
	if len(pl.win) > 0 {
		// the event held back, stepped with the first of evs after it
		if isSegment(evs[0].Action) {
			pl.why = "the trace has segment events"
			return
		}
		pl.win = append(pl.win, evs[0])
		i = b.step(pl.win, 0, pl.base) + 1 // 2 when it took evs[0] too
		if pl.see != nil {
			pl.see(pl.win[:i], b.opens[:i])
		}
		pl.win = pl.win[:0]
		i--       // the index in evs of the first event not stepped
		pl.base++ // now evs[0]'s index
	}
	last := len(evs) - 1
	at := i
	if i = b.stepPlain(evs, i, last, pl.base); i < 0 {
		pl.why = "the trace has segment events"
		return
	}
	if pl.see != nil && at < i {
		pl.see(evs[at:i], b.opens[at:i]) // step put each event's at its index
	}
	if i == last {
		pl.win = append(pl.win, evs[last])
		pl.base += last
	} else {
		pl.base += len(evs)
	}
	if b.freedFirst {
		pl.why = "the trace starts after the program had allocated" // as plan says
	}
}

// plan plans the window's events, all of them at the end of the trace,
// else all but those whose plan depends on the next event.
func (pl *Planner) plan(end bool) {
	b, w := &pl.b, pl.win
	// stepReady's loop with b.step called directly: through the method
	// value every event would cost an indirect call and its wrapper
	i, lim := pl.done, pl.ready(end)
	for i < lim {
		i = b.step(w, i, pl.base) + 1
	}
	if pl.walk != nil {
		for k := pl.done; k < i; k++ {
			k = pl.walk.step(w, k, pl.base)
		}
		if pl.walk.anyApart {
			pl.why = privatePools // an exclusion: evidence whatever follows
		}
	}
	if b.freedFirst && pl.snap == nil {
		// a block live when the trace began, which only the backward walk
		// of FromSnapshot rebuilds
		pl.why = "the trace starts after the program had allocated"
	}
	if pl.see != nil && pl.seen < i {
		pl.see(w[pl.seen:i], b.opens[pl.seen:i])
	}
	pl.slide(i, pl.walk != nil)
	pl.seen = pl.done
}

// Plan ends the trace and returns its plan, snap being the snapshot the
// events came from (its segments, settings and other devices' traces
// aside); nil when the planner declined, or declines now that it sees the
// snapshot: one with segments, whose end state the replay is checked
// against.
func (pl *Planner) Plan(snap *trace.Snapshot) *Plan {
	if pl.snap != nil {
		return pl.planSnapshot()
	}
	if pl.why == "" && len(snap.Segments) > 0 {
		pl.why = "the snapshot has segments"
	}
	if pl.why != "" {
		return nil
	}
	pl.plan(true)
	if pl.why != "" {
		return nil
	}
	p := pl.packed()
	p.expandable = snap.Settings.ExpandableSegments
	if snap.Settings.Present {
		st := snap.Settings
		p.settings = &st
	}
	// without segment events only the oom events bound a cap
	p.inferCap(snap.Settings, 0, nil)
	return p
}

// packed is the plan of the whole trace, planned, its ops in the log.
func (pl *Planner) packed() *Plan {
	p := pl.b.p
	p.Events = int(pl.b.counted)
	if pl.seeEnd != nil {
		var open []uint64
		for addr, l := range p.byAddr.All() {
			if l.open > 0 {
				open = append(open, addr)
			}
		}
		slices.Sort(open)
		pl.seeEnd(open)
	}
	p.byAddr, p.freeIDs = addrmap.Map[live1]{}, nil
	p.finalAt = p.log.n
	return p
}

// Len is the number of operations of the plan (so far, while it is
// planned).
func (p *Plan) Len() int {
	if p.log != nil {
		return p.log.n
	}
	return len(p.Ops)
}

// ReleasesBefore says an allocation of the plan is flagged
// alloc.FlagReleasedBefore: its replay then differs with the allocator's
// SetFollowsRecording.
func (p *Plan) ReleasesBefore() bool {
	if p.log != nil {
		return p.releasedBefore > 0
	}
	for i := range p.Ops {
		if p.Ops[i].Flags&alloc.FlagReleasedBefore != 0 {
			return true
		}
	}
	return false
}

// Allocs is how many of the plan's operations are allocations (OpAlloc):
// a packed plan counted them as they were added, without unpacking them.
func (p *Plan) Allocs() int {
	if p.log != nil {
		return p.log.allocs
	}
	n := 0
	for i := range p.Ops {
		if p.Ops[i].Kind == alloc.OpAlloc {
			n++
		}
	}
	return n
}

// Each hands f the plan's operations in order, with their Event and Stack
// (nil when the plan has none; 0 and -1 past the end of a shorter one),
// up to Batch at a time: base is the index
// of ops[0]. A streamed plan's are unpacked a batch at a time into slices
// Each reuses, so that a pass over a big plan needs no copy of it. Each
// stops at f's first error and returns it.
func (p *Plan) Each(f func(base int, ops []alloc.Op, event, stack []int32) error) error {
	if p.log != nil {
		base := 0
		return p.log.each(func(ops []alloc.Op, event, stack []int32) error {
			err := f(base, ops, event, stack)
			base += len(ops)
			return err
		})
	}
	var ev, st []int32
	for base := 0; base < len(p.Ops); base += Batch {
		end := min(base+Batch, len(p.Ops))
		event, stack := batchOf(p.Event, base, end, 0, &ev), batchOf(p.Stack, base, end, -1, &st)
		if err := f(base, p.Ops[base:end], event, stack); err != nil {
			return err
		}
	}
	return nil
}

// batchOf is s[lo:hi] when s covers it, nil when s is empty, and else s's
// part of it with def after s's end (in *buf, reused).
func batchOf(s []int32, lo, hi int, def int32, buf *[]int32) []int32 {
	switch {
	case len(s) >= hi:
		return s[lo:hi]
	case len(s) == 0:
		return nil
	}
	*buf = (*buf)[:0]
	for i := lo; i < hi; i++ {
		v := def
		if i < len(s) {
			v = s[i]
		}
		*buf = append(*buf, v)
	}
	return *buf
}

// Materialize unpacks a streamed plan's operations into Ops, Event and
// Stack, for what reads them beyond the replay (the HTML report, the
// stacks of an out-of-memory).
func (p *Plan) Materialize() {
	if p.log == nil {
		return
	}
	n := p.log.n
	p.Ops, p.Event, p.Stack = make([]alloc.Op, 0, n), make([]int32, 0, n), make([]int32, 0, n)
	_ = p.log.each(func(ops []alloc.Op, event, stack []int32) error {
		p.Ops = append(p.Ops, ops...)
		p.Event = append(p.Event, event...)
		p.Stack = append(p.Stack, stack...)
		return nil
	})
	p.log = nil
}
