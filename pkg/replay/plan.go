package replay

import (
	"fmt"
	"sort"

	"github.com/gpumem/gpumem/internal/addrmap"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// Plan is a recorded trace turned into allocator operations.
type Plan struct {
	Ops []alloc.Op
	// Event[i] is, for op i, the index among the trace's alloc and
	// free_completed events of the event it replays (for an OpAlloc, its
	// alloc event; for ops with no such event, the count of those events
	// before it). This is the "op_index" an out-of-memory is reported at.
	Event []int32
	// Stack[i] is the recorded stack of op i's event, -1 when none.
	Stack []int32
	// Skipped counts trace anomalies stepped over, by reason.
	Skipped map[string]int
	// RecordedOOMs counts out-of-memory events the program itself hit.
	RecordedOOMs int
	// EmptyCaches counts the empty_cache calls read from release runs (no
	// malloc's own, ~MemPool's pool-only ones included); a text trace's
	// explicit empty_cache marks are not among them.
	EmptyCaches int
	// Seeded counts allocations live before the first kept event that were
	// rebuilt from the snapshot's final segments (a truncated trace).
	Seeded int
	// Events is the number of alloc and free_completed events.
	Events int
	// Truncated says the trace began after the program had allocated:
	// Seeds hold the state it began in, and peaks cover the kept window.
	Truncated bool
	Seeds     []*Seed
	// releasedBefore counts the ops flagged alloc.FlagReleasedBefore
	releasedBefore int
	// recorded are the recording's device events, packed (see Recorded)
	recorded recorded
	// Final holds the snapshot's segments of this device at its end, when
	// the trace lists segments (HasFinal; FromSnapshot only).
	Final    []SegmentRange
	HasFinal bool
	// finalBlocks are the blocks of the final segments
	finalBlocks []blockEnd
	// Cap is the memory cap the recording shows, nil when it shows none
	// (FromSnapshot only; see Cap).
	Cap *Cap
	// settings are the recorded allocator settings, when the trace has them.
	settings *trace.Settings
	finalAt  int // len(Ops) when Final was taken: a cut plan ends elsewhere
	// expandable says the recording used expandable segments
	expandable bool
	// Pools are the private pools the trace used, as inferred from where
	// its allocations landed; empty when it used none (or the trace cannot
	// tell: expandable segments).
	Pools []Pool
	// entering holds the trace index of each release run followed at once
	// by allocations to a private pool (runInfo.enters): empty_cache()
	// calls, which bound no cap
	entering map[int]bool

	byAddr  addrmap.Map[live1]
	freeIDs []uint32
	next    uint32
	// a streamed plan (Planner) keeps its operations packed in log, not in
	// Ops, Event and Stack
	log *opLog
}

// Skip reasons.
const (
	SkipUnknownFree  = "free of an address not allocated in the trace"
	SkipDoubleAlloc  = "allocation at an address already live"
	SkipUnpairedDone = "free_completed without a pending free"
)

type live1 struct {
	id      uint32
	pending bool
	freed   bool // no longer live: the address was allocated and freed
	// open is the block a watch's builder counts open at the address
	// (see Watch): 1 + the index among the trace's alloc events of the
	// last alloc there, 0 once a free_requested of the address followed
	open int32
}

func newPlan() *Plan {
	return &Plan{Skipped: map[string]int{}}
}

func (p *Plan) newID() uint32 {
	if n := len(p.freeIDs); n > 0 {
		id := p.freeIDs[n-1]
		p.freeIDs = p.freeIDs[:n-1]
		return id
	}
	p.next++
	return p.next - 1
}

// Build turns one device's events into operations.
//
// Rules (docs/pytorch-allocator.md §7.3, §13.2, §15, §19):
//   - alloc → OpAlloc; the address of a segment_alloc/segment_map just
//     before it becomes its Hint, so the simulated device reuses it.
//   - free_requested immediately followed by free_completed of the same
//     address → OpFree; a free_requested left waiting (another stream used
//     the block) → OpFreeRequest, and its later free_completed →
//     OpFreeComplete.
//   - a run of segment_free/segment_unmap is the release steps of a
//     failing malloc (no op: the replayed malloc does them) when an oom
//     follows, or a segment_map, or a segment_alloc that the reserved bytes
//     before the run plus its size would push past the trace's peak (the
//     first attempt must have failed; a fixed cap admits every level the
//     trace reached); otherwise it is an empty_cache call → OpEmptyCache
//     (graph capture starts with one, and its first allocation follows at
//     once). Under garbage collection every run followed by a segment_alloc
//     is taken as the malloc's own. Past the peak the allocation after the
//     run is flagged alloc.FlagReleasedBefore: a replay that follows its
//     recording makes the run an empty_cache when its malloc would not
//     have released (docs/pytorch-allocator.md §19.5).
//   - oom → an OpAlloc of the size the program asked for, flagged
//     alloc.FlagRecordedOOM, followed by an OpFree: replayed as recorded it
//     fails, is counted, and the replay goes on as the program did; under
//     other settings or another card it may fit.
//   - private pools (pools.go): each alloc is routed to the pool of the
//     segment it landed in; a pool is released (OpPoolRelease) before the
//     first release run that frees one of its segments.
func Build(events []trace.Event) *Plan {
	p := newPlan()
	p.build(events, nil, alloc.DefaultConfig())
	return p
}

// settingsConfig is the allocator configuration a snapshot records.
func settingsConfig(st trace.Settings) alloc.Config {
	c := alloc.DefaultConfig()
	if !st.Present {
		return c
	}
	if st.MaxSplitSize > 0 {
		c.MaxSplitSize = uint64(st.MaxSplitSize)
	}
	c.GCThreshold = st.GCThreshold
	c.ExpandableSegments = st.ExpandableSegments
	for i, d := range st.RoundupPower2Divisions {
		if i < len(c.RoundupPower2Divisions) {
			c.RoundupPower2Divisions[i] = uint32(max(d, 0))
		}
	}
	return c
}

// reservedPeak is the most reserved bytes the trace's segment events reach
// from start bytes.
func reservedPeak(events []trace.Event, start uint64) uint64 {
	r, peak := start, start
	for i := range events {
		switch events[i].Action {
		case trace.ActionSegmentAlloc, trace.ActionSegmentMap:
			r += events[i].Size
			peak = max(peak, r)
		case trace.ActionSegmentFree, trace.ActionSegmentUnmap:
			r -= min(r, events[i].Size)
		}
	}
	return peak
}

func (p *Plan) build(events []trace.Event, final []trace.Segment, cfg alloc.Config) {
	p.buildWith(events, cfg, inferPools(events, final, cfg))
}

// buildWith is build with the trace's private pools already inferred (pp;
// nil: none).
func (p *Plan) buildWith(events []trace.Event, cfg alloc.Config, pp *poolPlan) {
	var start uint64
	for _, s := range p.Seeds {
		start += s.Size
	}
	b := &builder{p: p, cfg: cfg, reserved: start, peak: reservedPeak(events, start)}
	b.usePools(pp)
	// size the op lists once: replays of big traces must stay within a
	// small multiple of the file's size
	n := 0
	for i := range events {
		switch events[i].Action {
		case trace.ActionAlloc, trace.ActionFreeRequested:
			n++
		case trace.ActionSegmentFree, trace.ActionSegmentUnmap, trace.ActionOOM:
			n += 2
		}
	}
	p.Ops = make([]alloc.Op, 0, n)
	p.Event = make([]int32, 0, n)
	p.Stack = make([]int32, 0, n)
	for i := 0; i < len(events); i++ {
		i = b.step(events, i, 0)
	}
	p.Events = int(b.counted)
	p.byAddr, p.freeIDs = addrmap.Map[live1]{}, nil
}

// builder turns events into a plan's operations, one event (or one run
// of them) at a time: Build applies it to a whole trace, a Planner to the
// events of a trace as they are read.
type builder struct {
	p        *Plan
	pp       *poolPlan // nil when the trace used no private pool
	poolIdx  []int32   // per pool number, its index in p.Pools (-1: none)
	cfg      alloc.Config
	reserved uint64 // reserved bytes by the segment events so far
	peak     uint64 // the most reserved bytes the trace reaches
	hint     uint64 // the address of a segment_alloc/segment_map just before
	// releasedBefore: the release run before the segment the next alloc
	// made may have been an empty_cache() (alloc.FlagReleasedBefore)
	releasedBefore bool
	counted        int32 // alloc and free_completed events so far
	allocs         int   // alloc events so far
	// freedFirst: a free of an address the trace had not allocated
	// before, a block live before the trace began
	freedFirst bool
	// afterOOM: the last device event was a recorded out-of-memory, whose
	// malloc had already released what it could
	afterOOM bool
	// afterDevice: the last event noted was a device event; streams
	// indexes the streams of the events noted, the last one's index kept
	afterDevice   bool
	streams       map[uint64]uint32
	lastStream    uint64
	lastStreamIdx uint32
	// opens gets each alloc and free_requested event's open block before
	// it (live1.open), by the event's index in the events step is given:
	// a Planner's window, for its watch (other callers leave it unread;
	// the index wraps, so that they need no test)
	opens [plannerWindow]int32
}

// usePools routes the plan's allocations to the pools of pp (nil: the
// trace used none).
func (b *builder) usePools(pp *poolPlan) {
	b.pp = pp
	if pp == nil {
		return
	}
	b.p.Pools = pp.pools
	for _, r := range pp.runs {
		if r.enters {
			if b.p.entering == nil {
				b.p.entering = map[int]bool{}
			}
			b.p.entering[int(r.at)] = true
		}
	}
	// pools are numbered from 1 up (pp.pools ascends): a slice, not a map,
	// looked up per pool a release run releases
	b.poolIdx = nil
	if n := len(pp.pools); n > 0 {
		b.poolIdx = make([]int32, pp.pools[n-1].Pool+1)
		for i := range b.poolIdx {
			b.poolIdx[i] = -1
		}
		for i, pl := range pp.pools {
			b.poolIdx[pl.Pool] = int32(i)
		}
	}
}

// emit adds op, of the current event, with its stack: to the plan's log
// when it streams, else to its Ops. It takes op by its address, which
// the log reads in place: a copy of an op just written field by field
// would wait on those stores.
func (b *builder) emit(op *alloc.Op, stack int32) {
	p := b.p
	if p.log != nil {
		p.log.put(op, b.counted, stack)
		return
	}
	p.Ops = append(p.Ops, *op)
	p.Event = append(p.Event, b.counted)
	p.Stack = append(p.Stack, stack)
}

// liveAt is the entry of addr in the plan's live allocations, nil when
// the address was never allocated; an entry marked freed is not live.
// It is good until the next change to the map (addrmap.Map.Ref).
func (b *builder) liveAt(addr uint64) *live1 {
	return b.p.byAddr.Ref(addr)
}

// done ends the allocation of entry l: its id is free again; the address
// stays known (see live1.freed).
func (b *builder) done(l *live1) {
	b.p.freeIDs = append(b.p.freeIDs, l.id)
	*l = live1{freed: true, open: l.open}
}

// unknownFree counts a free of an address that is not live, whose entry
// is l (nil: the trace never allocated it).
func (b *builder) unknownFree(l *live1) {
	b.p.Skipped[SkipUnknownFree]++
	if l == nil {
		b.freedFirst = true
	}
}

// step plans events[i], whose index in the whole trace is base+i, and
// returns the index of the last event it used: a free_requested takes
// the free_completed after it, a segment release the rest of its run.
func (b *builder) step(events []trace.Event, i, base int) int {
	p := b.p
	e := &events[i]
	if b.afterDevice || isDevice(e.Action) { // else noteDevice keeps nothing
		b.noteDevice(base+i, e)
	}
	if e.Action != trace.ActionAlloc && e.Action != trace.ActionSegmentAlloc && e.Action != trace.ActionSegmentMap {
		b.releasedBefore = false // it marks the alloc right after a release run's segment
	}
	switch e.Action {
	case trace.ActionSegmentAlloc, trace.ActionSegmentMap:
		b.hint = e.Addr
		b.reserved += e.Size
		b.afterOOM = false
	case trace.ActionAlloc:
		k := b.allocs // its index among the trace's alloc events
		b.allocs++
		l, known := p.byAddr.Put(e.Addr)
		b.opens[i&(plannerWindow-1)] = l.open
		l.open = int32(k + 1)
		if known && !l.freed {
			p.Skipped[SkipDoubleAlloc]++
			b.counted++
			return i
		}
		id := p.newID()
		*l = live1{id: id, open: l.open}
		if p.log != nil && e.Stream|b.hint == 0 && !b.releasedBefore && b.pp == nil {
			// the usual allocation, of a size alone: emit, packed by
			// putAlloc without building the op
			p.log.putAlloc(id, e.Size, b.counted, e.Stack)
			b.counted++
			return i
		}
		op := &alloc.Op{Kind: alloc.OpAlloc, ID: id, Size: e.Size, Stream: e.Stream, Hint: b.hint}
		if b.releasedBefore {
			op.Flags |= alloc.FlagReleasedBefore
			b.releasedBefore = false
			p.releasedBefore++
		}
		if b.pp != nil {
			op.Pool = uint32(b.pp.allocPool[k])
			if b.pp.claim.has(base + i) {
				op.Flags, op.Hint = alloc.FlagClaim, e.Addr
			}
		}
		b.emit(op, e.Stack)
		b.hint = 0
		b.counted++
	case trace.ActionFreeRequested:
		paired := i+1 < len(events) && events[i+1].Action == trace.ActionFreeCompleted && events[i+1].Addr == e.Addr
		l := b.liveAt(e.Addr)
		if l != nil {
			b.opens[i&(plannerWindow-1)] = l.open
			l.open = 0
		} else {
			b.opens[i&(plannerWindow-1)] = 0
		}
		if l == nil || l.freed || l.pending {
			b.unknownFree(l)
			if paired {
				i++
				b.counted++
			}
			return i
		}
		if paired {
			// emit, with the usual free packed by putFree without
			// building the op
			if p.log != nil {
				p.log.putFree(l.id, b.counted, e.Stack)
			} else {
				b.emit(&alloc.Op{Kind: alloc.OpFree, ID: l.id}, e.Stack)
			}
			b.counted++
			b.done(l)
			return i + 1
		}
		b.emit(&alloc.Op{Kind: alloc.OpFreeRequest, ID: l.id}, e.Stack)
		l.pending = true
	case trace.ActionFreeCompleted:
		l := b.liveAt(e.Addr)
		switch {
		case l == nil || l.freed:
			b.unknownFree(l)
		case !l.pending:
			// a truncated trace can start between the two halves of a free
			b.emit(&alloc.Op{Kind: alloc.OpFree, ID: l.id}, e.Stack)
			b.done(l)
		default:
			b.emit(&alloc.Op{Kind: alloc.OpFreeComplete, ID: l.id}, e.Stack)
			b.done(l)
		}
		b.counted++
	case trace.ActionSegmentFree, trace.ActionSegmentUnmap:
		return b.release(events, i, base)
	case trace.ActionEmptyCache: // only gpumem's text traces mark it
		b.emit(&alloc.Op{Kind: alloc.OpEmptyCache}, -1)
	case trace.ActionOOM:
		b.afterOOM = true
		p.RecordedOOMs++
		id := p.newID()
		b.emit(&alloc.Op{Kind: alloc.OpAlloc, ID: id, Size: e.Size, Stream: e.Stream, Flags: alloc.FlagRecordedOOM}, e.Stack)
		b.emit(&alloc.Op{Kind: alloc.OpFree, ID: id}, e.Stack)
		p.freeIDs = append(p.freeIDs, id)
		b.hint = 0
	}
	return i
}

// release plans the run of segment_free/segment_unmap events starting at
// events[i] and returns the index of its last event.
func (b *builder) release(events []trace.Event, i, base int) int {
	p := b.p
	j := i
	for j+1 < len(events) && (events[j+1].Action == trace.ActionSegmentFree || events[j+1].Action == trace.ActionSegmentUnmap) {
		j++
		b.noteDevice(base+j, &events[j])
	}
	before := b.reserved
	for k := i; k <= j; k++ {
		b.reserved -= min(b.reserved, events[k].Size)
	}
	caused := false
	if j+1 < len(events) {
		switch next := &events[j+1]; next.Action {
		case trace.ActionOOM:
			caused = true
		case trace.ActionSegmentMap:
			// pages mapped after pages unmapped: the malloc's own release,
			// unless the replay's cache says it would not release
			caused = true
			b.releasedBefore = b.cfg.GCThreshold == 0 || b.afterOOM
		case trace.ActionSegmentAlloc:
			caused = !b.afterOOM && (b.cfg.GCThreshold > 0 || before+next.Size > b.peak)
			// past the peak the malloc may have released for itself, or
			// the program called empty_cache(): the replay's cache decides.
			// Under garbage collection every such run is taken as the
			// malloc's own, except after a caught out-of-memory: the
			// failing malloc released all it could before its oom entry,
			// so a run after it is the program's empty_cache() unless the
			// next malloc needed it (docs/pytorch-allocator.md §19.5)
			b.releasedBefore = caused && (b.cfg.GCThreshold == 0 || b.afterOOM)
		}
	}
	var ri runInfo
	if b.pp != nil {
		ri = b.pp.runAt(base + i)
	}
	if ri.enters && events[j+1].Action == trace.ActionSegmentAlloc {
		// a capture or MemPool window begins: empty_cache(), never a retry
		caused, b.releasedBefore = false, false
	}
	at := p.Len()
	for _, pool := range ri.release {
		b.emit(&alloc.Op{Kind: alloc.OpPoolRelease, Pool: pool}, -1)
		if int(pool) < len(b.poolIdx) && b.poolIdx[pool] >= 0 {
			p.Pools[b.poolIdx[pool]].Released = int(b.counted)
		}
	}
	// releasing a pool does nothing on the device: the run's segments go
	// at the op after (empty_cache, emptyCache, the failing malloc), where
	// a replay's device log has them
	if after := p.Len(); after != at {
		p.recorded.retag(at, after)
	}
	switch {
	case caused:
	case ri.poolOnly && len(ri.release) > 0:
		for _, pool := range ri.release {
			b.emit(&alloc.Op{Kind: alloc.OpPoolEmpty, Pool: pool}, -1)
		}
		p.EmptyCaches++
	default:
		b.emit(&alloc.Op{Kind: alloc.OpEmptyCache}, -1)
		p.EmptyCaches++
	}
	return j
}

// ops returns a stable description of a plan, for tests and debugging.
func (p *Plan) String() string {
	kinds := map[alloc.OpKind]int{}
	for _, op := range p.Ops {
		kinds[op.Kind]++
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, fmt.Sprintf("%s=%d", k, kinds[k]))
	}
	sort.Strings(names)
	return fmt.Sprintf("%d ops %v, %d events", len(p.Ops), names, p.Events)
}
