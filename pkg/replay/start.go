package replay

import (
	"slices"

	"github.com/gpumem/gpumem/internal/addrmap"
	"github.com/gpumem/gpumem/pkg/trace"
)

// privatePools is why a snapshot planner declines a trace that used
// private pools: their inference labels allocations from what happened
// later.
const privatePools = "the trace used private pools"

// StartState reads one device's trace forward, as the file is read, for
// what its plan needs before the first event: the state the trace began
// in (FromSnapshot rebuilds it walking back from the end) and the most
// reserved bytes its segment events reach. It keeps a few words per
// address the trace touches, nothing per event, so that a big snapshot
// can be planned in a second read of the file (NewSnapshotPlanner).
//
// The walk back is, for each address on its own, a chain of undo steps
// applied to the final state, the trace's first event last. Read forward,
// the chain so far composes into one of four forms (see undo), so each
// address keeps one.
type StartState struct {
	blocks addrmap.Map[undo]
	segs   addrmap.Map[segFirst] // a probe an event, where a Go map took two
	// Reserved bytes after each segment event are max(start+a, b) for the
	// start's reserved bytes, not known until the end: the walk clamps at 0.
	a, b, maxA, maxB int64
	// mapped: the trace has expandable segments, where pools are not
	// modelled
	mapped bool
	// paged: it maps or unmaps pages (a trace cut short may unmap only)
	paged     bool
	events    int // read so far, and the allocs and segment_allocs of
	allocs    int // them: a later read sizes its arrays with them
	segAllocs int
}

// undo is the walk back's steps over one address's events so far, as a
// function of the state after them: undoing an alloc leaves no block
// (uAbsent); undoing a free_completed keeps a live block and else leaves
// a pending one of its size (uPending, or uLive with pending once
// constant); undoing a free_requested leaves a live block of its size
// with the size of the block after it (uRequested).
type undo struct {
	requested uint64
	kind      uint8
	pending   bool
}

const (
	uAbsent    = iota + 1 // no block, whatever follows
	uLive                 // the block {requested, 0, pending}, whatever follows
	uPending              // the block after, else {requested, 0, pending}
	uRequested            // {requested, size of the block after, not pending}
)

// segFirst is the first segment event of an address: the segment existed
// before the trace when it was a segment_free. allocated: the trace
// allocates a segment there. last is the last one's index when it was a
// segment_alloc, -1 when a segment_free.
type segFirst struct {
	seg                segState
	present, allocated bool
	last               int32
}

// NewStartState starts reading a trace.
func NewStartState() *StartState {
	return &StartState{}
}

// Add reads the next event.
func (s *StartState) Add(e *trace.Event) {
	s.events++
	switch e.Action {
	case trace.ActionAlloc:
		s.allocs++
	case trace.ActionSegmentAlloc:
		s.segAllocs++
	}
	switch e.Action {
	case trace.ActionSegmentAlloc, trace.ActionSegmentMap:
		s.a += int64(e.Size)
		s.b += int64(e.Size)
		s.maxA, s.maxB = max(s.maxA, s.a), max(s.maxB, s.b)
		s.mapped = s.mapped || e.Action == trace.ActionSegmentMap
		s.paged = s.paged || e.Action == trace.ActionSegmentMap
	case trace.ActionSegmentFree, trace.ActionSegmentUnmap:
		s.a -= int64(e.Size)
		s.b = max(s.b-int64(e.Size), 0)
		s.paged = s.paged || e.Action == trace.ActionSegmentUnmap
	}
	switch e.Action {
	case trace.ActionSegmentAlloc:
		f, _ := s.segs.Put(e.Addr) // zero when it is the first: no segment before
		f.allocated, f.last = true, int32(s.events-1)
	case trace.ActionSegmentFree:
		f, ok := s.segs.Put(e.Addr)
		if !ok {
			*f = segFirst{seg: segState{size: e.Size, stream: e.Stream, small: e.Size == 2<<20}, present: true}
		}
		f.last = -1
	case trace.ActionAlloc, trace.ActionFreeCompleted, trace.ActionFreeRequested:
		// an address whose chain began with an alloc (most) keeps it
		// whatever follows: compose is not called for it
		if g, _ := s.blocks.Put(e.Addr); g.kind != uAbsent && g.kind != uLive {
			*g = compose(*g, e)
		}
	}
}

// compose is the undo of the events of g followed by e. A zero g (an
// address not seen) composes into e's own step.
func compose(g undo, e *trace.Event) undo {
	if g == (undo{}) {
		switch e.Action {
		case trace.ActionAlloc:
			return undo{kind: uAbsent}
		case trace.ActionFreeCompleted:
			return undo{kind: uPending, requested: e.Size, pending: true}
		}
		return undo{kind: uRequested, requested: e.Size}
	}
	switch g.kind {
	case uPending: // keeps what e's step leaves when it leaves a block
		if e.Action == trace.ActionAlloc {
			return undo{kind: uLive, requested: g.requested, pending: true}
		}
		return compose(undo{}, e)
	case uRequested: // keeps only the size of what e's step leaves
		if e.Action == trace.ActionAlloc {
			return undo{kind: uLive, requested: g.requested}
		}
	}
	return g
}

// apply is the state before the events of g, b being the one after them.
func (g undo) apply(b seedBlock, ok bool) (seedBlock, bool) {
	switch g.kind {
	case uAbsent:
		return seedBlock{}, false
	case uLive:
		return seedBlock{requested: g.requested, pending: g.pending}, true
	case uPending:
		if ok {
			return b, true
		}
		return seedBlock{requested: g.requested, pending: true}, true
	}
	return seedBlock{requested: g.requested, size: b.size}, true
}

// start is the state the trace began in, as FromSnapshot rebuilds it.
func (s *StartState) start(snap *trace.Snapshot, device int) (map[uint64]segState, map[uint64]seedBlock) {
	segs, live := finalState(snap, device)
	for a, f := range s.segs.All() {
		if f.present {
			segs[a] = f.seg
		} else {
			delete(segs, a)
		}
	}
	for a, g := range s.blocks.All() {
		b, ok := live[a]
		if b, ok = g.apply(b, ok); ok {
			live[a] = b
		} else {
			delete(live, a)
		}
	}
	return segs, live
}

// addresses is how many the plan's live allocations (Plan.byAddr) will
// hold at most: those the trace allocates or frees, and those of the
// blocks live before it (live, from start). The plan sizes its map with
// it once rather than doubling it as the trace is read.
func (s *StartState) addresses(live map[uint64]seedBlock) int {
	n := s.blocks.Len()
	for a := range live {
		if _, ok := s.blocks.Get(a); !ok {
			n++
		}
	}
	return n
}

// peak is reservedPeak for the trace read, start being the reserved bytes
// it began with.
func (s *StartState) peak(start uint64) uint64 {
	return uint64(max(int64(start)+s.maxA, s.maxB))
}

// NewSnapshotPlanner starts the plan of device's trace in snap, read a
// second time: st read it the first time, and snap (read then) gives its
// final segments and settings. Unlike NewPlanner's, its plans may have
// segment events and begin after the program allocated; it declines the
// traces whose plan needs more of the trace than a window of it: those
// that used private pools (their inference labels allocations from what
// happened later).
func NewSnapshotPlanner(snap *trace.Snapshot, device int, st *StartState) *Planner {
	pl := newSnapshotPlanner(snap, device, st)
	pl.walk = newInferer(pl.b.cfg)
	if st.poolSegment(snap, device) {
		pl.why = privatePools
	}
	return pl
}

// poolSegment says whether a final segment of device in snap is of a
// private pool and was allocated by the trace st read: that settles that
// the trace used private pools before the second read (the walk labels
// it from the snapshot).
func (st *StartState) poolSegment(snap *trace.Snapshot, device int) bool {
	return !st.mapped && slices.ContainsFunc(deviceSegments(snap, device), func(s trace.Segment) bool {
		f, _ := st.segs.Get(s.Address)
		return s.PoolID != [2]int64{} && f.allocated
	})
}

// NewPoolPlanner is NewSnapshotPlanner for a trace that used private pools,
// read once more: w walked it for its pools, which the plan routes
// allocations to as FromSnapshot's does.
func NewPoolPlanner(snap *trace.Snapshot, device int, st *StartState, w *PoolWalk) *Planner {
	// the walk first: the planner's arrays (its live allocations, sized for
	// the whole trace) then take memory the walk's garbage left, not fresh
	// pages on top of the walk's
	pp := w.pools()
	pl := newSnapshotPlanner(snap, device, st)
	pl.b.usePools(pp)
	return pl
}

// newSnapshotPlanner is a snapshot planner with its start state, its
// settings and its cap's watch.
func newSnapshotPlanner(snap *trace.Snapshot, device int, st *StartState) *Planner {
	pl := NewPlanner()
	pl.snap, pl.device = snap, device
	p := pl.b.p
	segs, live := st.start(snap, device)
	p.byAddr.Reserve(st.addresses(live))
	p.seed(segs, live)
	var start uint64
	for _, s := range p.Seeds {
		start += s.Size
	}
	pl.b.cfg, pl.b.reserved, pl.b.peak = settingsConfig(snap.Settings), start, st.peak(start)
	pl.gc = newGCWatch(snap.Settings)
	return pl
}

// addDevice notes what a snapshot's planner needs of e beyond its plan.
func (pl *Planner) addDevice(e *trace.Event) {
	device := false
	switch e.Action {
	case trace.ActionSegmentMap, trace.ActionSegmentUnmap:
		pl.walk = nil // expandable segments: pools are not modelled there
	}
	switch e.Action {
	case trace.ActionSegmentAlloc, trace.ActionSegmentMap:
		pl.netSeg += int64(e.Size)
		device = true
	case trace.ActionSegmentFree, trace.ActionSegmentUnmap:
		pl.netSeg -= int64(e.Size)
		device = true
	case trace.ActionOOM:
		device = true
	}
	// inferCap looks at the events beside a device event, no further: the
	// plan keeps those (noteDevice), the watch's count before each here
	if pl.gc != nil {
		if device || pl.afterDevice {
			pl.gcFree = append(pl.gcFree, int32(pl.gc.free))
		}
		pl.gc.see(e.Action, e.Addr, e.Size) // the watch follows every block
	}
	pl.afterDevice = device
}

// planSnapshot ends a snapshot planner's trace (see Plan).
func (pl *Planner) planSnapshot() *Plan {
	if pl.why == "" {
		pl.plan(true)
	}
	final := deviceSegments(pl.snap, pl.device)
	if pl.why == "" && pl.walk != nil && pl.walk.evidence(final) != nil {
		pl.why = privatePools
	}
	if pl.why != "" {
		return nil
	}
	p := pl.packed()
	reserved0 := p.noteFinal(pl.snap, pl.device, pl.netSeg)
	p.noteStart(reserved0)
	p.inferCap(pl.snap.Settings, reserved0, pl.gcFree)
	return p
}
