package replay

import (
	"slices"

	"github.com/gpumem/gpumem/internal/membudget"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// Pool is a private memory pool (a CUDA graph's, a torch.cuda.MemPool's)
// that a trace used, as the plan inferred it. Events carry no pool id, so
// membership comes from where allocations landed (docs/pytorch-allocator.md
// §19.4).
type Pool struct {
	Pool uint32   // the ops' alloc.Op.Pool
	ID   [2]int64 // PyTorch's MempoolId_t when the final snapshot names it, else zero
	// Segments and Allocs count the segments created in it and the
	// allocations it served.
	Segments, Allocs int
	// Released is the index of the event (among alloc and free_completed,
	// as OOM indexes count) before which the pool was released (its graph
	// or MemPool deleted), -1 when the trace never shows it.
	Released int
	// How names the evidence: "snapshot" (segment_pool_id of the final
	// segments), "release order" (empty_cache runs), "exclusion" (requests
	// that passed over its free blocks), "continuity" (neighbouring
	// allocations on the stream).
	How []string
}

// Pool-inference evidence names.
const (
	howSnapshot   = "snapshot"
	howOrder      = "release order"
	howExclusion  = "exclusion"
	howContinuity = "continuity"
	howRestore    = "checkpoint restore"
)

// runInfo says what a release run (a maximal run of segment_free events)
// needs before it: the pools released, and whether it was ~MemPool's
// pool-only emptyCache rather than a global one.
type runInfo struct {
	release  []uint32
	poolOnly bool
	// enters: the allocations right after the run go to a private pool
	// (a graph capture or a MemPool window begins), so the run cannot be
	// a failing malloc's retry: no retry runs while a capture or a
	// MemPool window is open (docs/pytorch-allocator.md §19.5)
	enters bool
}

// poolPlan is what inference hands the plan builder.
type poolPlan struct {
	allocPool []int32 // per alloc event, in order: its pool
	claim     bitset  // per event index: an alloc that claims its block by address
	// runs: the release runs that release a pool, are pool-only or enter
	// one, by their first event's index, ascending; next is where the
	// last look-up (runAt) ended: the builder asks in trace order
	runs []poolRun
	next int
	// released: the pools each run releases, one run's after another's
	// (a run releases one pool mostly: a slice of its own each would be
	// an object on the heap per run)
	released []uint32
	pools    []Pool
}

// poolRun is the release run whose first event is at, in 12 bytes and no
// pointer (a trace may have a run every few events): the pools it
// releases begin at off in poolPlan.released, and end where the next
// run's begin.
type poolRun struct {
	at, off          int32
	poolOnly, enters bool // as runInfo's
}

// bitset is a set of small integers.
type bitset []uint64

func (b bitset) has(i int) bool { return b[i>>6]&(1<<(i&63)) != 0 }
func (b bitset) set(i int)      { b[i>>6] |= 1 << (i & 63) }

const (
	labelUnknown = -1
	labelDefault = 0
	labelPrivate = -2 // private, pool not known yet
)

type modelBlock struct {
	addr, size uint64
	free       bool
}

// segmentInfo is one segment of the trace, as the walk and labelling
// see it: a trace has many (a segment per few events in some), so its
// fields are narrow and hold no pointer (the collector need not scan
// them), and what only a live segment needs is apart (segLive).
type segmentInfo struct {
	addr, size uint64 //
	live       int32  // its block model's index in inferer.live, -1 once freed
	stream     uint32 // its stream's index in inferer.streams
	label      int32  // labelUnknown, labelDefault, labelPrivate or a pool > 0
	born       int32  // event index
	firstAlloc int32  // its first allocation's index in the records (walkFull), -1 if none
	how        uint8  // the evidence of its label, an index in howNames
	small      bool
	broken     bool // the events did not fit the block model: no evidence from it
	// samePass: a classed segment (segClass) passed over a block of its
	// own class
	samePass bool
}

// segClass is a segment's class, apart from segmentInfo: a walk whose
// trace has no class keeps none (inferer.classes), and its segments take
// 40 bytes each, not 56. class: for a segment the snapshot will label
// (alive at the end, a final segment's), the index of its pool id in
// inferer.classIDs; -1 for any other (open). An open segment keeps its
// exclusions from classed ones summed up: the lowest of them (min, -1:
// none) and the index of their classes in inferer.closedSets (set, -1:
// none).
type segClass struct{ class, min, set int32 }

// classOf is segment si's class (segClass), -1 when it has none.
func (f *inferer) classOf(si int) int32 {
	if f.classes == nil {
		return -1
	}
	return f.classes[si].class
}

// segLive is the block model of a live segment. A freed segment's goes
// back to inferer.spare for the next segment made, its slices' room
// kept: a walk makes a block model per segment of the trace, and so
// allocates only as many as are ever live at once.
type segLive struct {
	blocks    []modelBlock // address order
	free      []int32      // its free blocks' nodes (pools_free.go)
	lastAddr  uint64       // the address of the latest allocation in it
	lastAlloc int32        // the event of the latest allocation in it, -1 if none
	fk        int32        // the index of its stream and size class
	whole     int32        // its index in inferer.whole, -1 when not there
}

// howNames are the evidence names by index (segmentInfo.how).
var howNames = [...]string{"", howSnapshot, howOrder, howExclusion, howContinuity, howRestore}

// howIndex is how's index in howNames.
func howIndex(how string) uint8 {
	for i, h := range howNames {
		if h == how {
			return uint8(i)
		}
	}
	return 0
}

// closedIDs are the classes open segment si was found apart from, nil
// when none.
func (f *inferer) closedIDs(si int) []uint64 {
	if f.classes == nil {
		return nil
	}
	if c := f.classes[si].set; c >= 0 {
		return f.closedSets[c]
	}
	return nil
}

// walkMode is what a walk of the block model records.
type walkMode uint8

const (
	// walkDetect finds whether the trace shows private pools: exclusions
	// are not recorded, only whether there is one (a streamed planner's)
	walkDetect walkMode = iota
	// walkFull records the evidence labelling needs (keepRecords)
	walkFull
	// walkClaims walks again, knowing every segment's pool, for the
	// allocations that passed over a block of their own pool (claims)
	walkClaims
)

type inferer struct {
	cfg    alloc.Config
	mode   walkMode
	events []trace.Event // the whole trace; nil in a streamed walk
	// per alloc event, in order (walkFull): what the labels read of it,
	// its index in the trace, and the segment it landed in (-1: none);
	// nEvents and nAllocs count the events recorded and the allocs walked
	rec           []eventRecord
	allocAt       []int32
	segOfAlloc    []int32
	nEvents       int
	nAllocs       int
	streams       map[uint64]uint32
	lastStream    uint64 // the stream streamIndex was last asked for, and its index
	lastStreamIdx uint32
	streamIDs     []uint64 // the streams by index
	segs          []segmentInfo
	live          []segLive  // the live segments' block models, and those spare
	spare         []int32    // the indexes in live of those spare
	bases         []uint64   // live segments' bases, sorted
	baseSeg       []int32    // and the segment at each
	atCache       [256]int32 // per MiB of the address space, hashed: the segment at found there last, plus one (0: none)
	tree          *freeTree
	keys          [][2]int32 // per stream (its index) and size class (small: 1), its index in roots, -1 none
	roots         []int32    // their free sets (pools_free.go)
	mask          []uint64   // a buffer of classes
	// apart: pairs of open segments known to be in different pools (a
	// classed segment's exclusions are summed up in its open partner;
	// exclusions adds the pairs labelling reads of those), lastApart the
	// pair added last; anyApart: the walk found an exclusion
	apart      apartSet
	lastApart  [2]int32
	anyApart   bool
	classes    []segClass // per segment, when the walk has classes
	closedSets [][]uint64 // see segClass
	// per run: the segments it freed, in order (run), and the open
	// whole-free segments it left (surv), each runs' lists one after
	// another in one slice with where each begins
	runSegs, runOff   []int32
	survSegs, survOff []int32
	runAt             []int32 // per run: its first event index
	runEnd            []int32 // per run: its last event index
	survDef           []bool  // per run: it left a whole-free classed segment of the default pool
	claim             bitset  // per event: an alloc that claims its block by address
	orderOK           bool    // no GC or max_split_size: releases free every whole segment in order
	// runStart: per run, where its global release begins; the segments
	// before it were one pool's own release (~MemPool's emptyCache)
	// just before an empty_cache(), so they share a pool (group)
	runStart  []int
	groups    [][]int32   // the segments of each pool-only release
	groupOf   map[int]int // segment → its group
	divisions bool        // roundup_power2_divisions set
	// closedAt: per final segment's address, the event that made the
	// segment alive there at the end and its class (walkFull); classIDs
	// the pool id of each class, defClass the default pool's (-1: none)
	closedAt map[uint64]closedSeg
	classIDs [][2]int64
	defClass int32
	whole    []int32 // live open segments that are one free block
	wholeDef int     // and how many classed ones of the default pool
	// walkClaims: each segment's class (its pool after labelling, -1
	// for none); again walks the trace once more for g
	segClass []int32
	// skipOpen (walkClaims): the block model of segments of no class is
	// left out, as no claim is asked of it and each segment's blocks
	// follow its own events alone: the first walk saw their restores.
	// Not when two live segments shared a base (sharedBase, seen by the
	// first walk), where a free block is taken back by address alone.
	skipOpen   bool
	sharedBase bool
	// overlap: two live segments overlapped (seen by the first walk);
	// ownFree (walkClaims): each segment's free blocks are found among
	// its own, not in its stream's free set, which the walk then does
	// not keep (skipOpen, and no overlap: no other segment's block can
	// lie at a block's address)
	overlap bool
	ownFree bool
	byClass [][]int32 // the free sets of each stream and size class, by block class (classRoot)
	again   func(g *inferer)
}

// run is the segments release run r freed, in order.
func (f *inferer) run(r int) []int32 { return listAt(f.runSegs, f.runOff, r) }

// surv is the open whole-free segments release run r left, ascending.
func (f *inferer) surv(r int) []int32 { return listAt(f.survSegs, f.survOff, r) }

// listAt is list k of lists laid one after another in all, the kth
// beginning at off[k].
func listAt(all, off []int32, k int) []int32 {
	end := len(all)
	if k+1 < len(off) {
		end = int(off[k+1])
	}
	return all[off[k]:end:end]
}

// closedSeg is a segment alive at the end of the trace that a final
// segment names: the event that made it and its class.
type closedSeg struct {
	born  int
	class int32
}

// inferPools labels every segment of the trace with its pool. final holds the
// snapshot's final segments of this device (nil when unknown).
func inferPools(events []trace.Event, final []trace.Segment, cfg alloc.Config) *poolPlan {
	f := walkPools(events, final, cfg)
	if f == nil {
		return nil
	}
	return f.poolPlan(final)
}

// walkPools walks the block model of the trace for inferPools; nil when
// pools are not modelled.
func walkPools(events []trace.Event, final []trace.Segment, cfg alloc.Config) *inferer {
	allocs, segs := 0, 0
	for i := range events {
		switch events[i].Action {
		case trace.ActionSegmentMap, trace.ActionSegmentUnmap:
			return nil // expandable segments: pools are not modelled there
		case trace.ActionAlloc:
			allocs++
		case trace.ActionSegmentAlloc:
			segs++
		}
	}
	f := newInferer(cfg)
	f.events = events
	f.keepRecords(len(events), allocs, segs)
	last := map[uint64]int{}
	for _, fs := range final {
		last[fs.Address] = -2 // not seen
	}
	for i := range events {
		switch e := &events[i]; e.Action {
		case trace.ActionSegmentAlloc, trace.ActionSegmentFree:
			if _, ok := last[e.Addr]; ok {
				last[e.Addr] = -1
				if e.Action == trace.ActionSegmentAlloc {
					last[e.Addr] = i
				}
			}
		}
	}
	f.predict(final, func(addr uint64) (int, bool) {
		i := last[addr]
		return i, i != -2
	})
	for i := range events {
		f.record(&events[i])
	}
	f.walk()
	f.again = func(g *inferer) {
		g.events = events
		g.walk()
	}
	return f
}

// predict finds the segments the snapshot's final segments will label
// (those alive at the end at their addresses), before the walk, so that
// the walk sums up their exclusions by pool: last says of an address the
// index of the last segment event there when it was a segment_alloc, -1
// when a segment_free, and whether there was one.
func (f *inferer) predict(final []trace.Segment, last func(addr uint64) (int, bool)) {
	// sized once: a map grown key by key leaves its smaller tables as garbage
	poolAt := make(map[uint64][2]int64, len(final))
	for _, fs := range final {
		poolAt[fs.Address] = fs.PoolID
	}
	class := map[[2]int64]int32{}
	f.closedAt, f.defClass = make(map[uint64]closedSeg, len(final)), -1
	for _, fs := range final {
		i, ok := last(fs.Address)
		if !ok || i < 0 {
			continue
		}
		id := poolAt[fs.Address]
		c, ok := class[id]
		if !ok {
			c = int32(len(f.classIDs))
			class[id] = c
			f.classIDs = append(f.classIDs, id)
			if id == ([2]int64{}) {
				f.defClass = c
			}
		}
		f.closedAt[fs.Address] = closedSeg{i, c}
	}
	f.tree = newFreeTree(len(f.classIDs), f.mode == walkFull)
	f.mask = make([]uint64, f.tree.words)
	if f.mode == walkFull && len(f.classIDs) > 0 {
		f.classes = make([]segClass, 0, cap(f.segs))
	}
}

// poolPlan labels the segments walked and plans their pools; nil when the
// trace shows no private pool.
func (f *inferer) poolPlan(final []trace.Segment) *poolPlan {
	ids := f.label(final)
	if ids == nil {
		return nil
	}
	// Labelling's working sets are garbage now, as much again as the walk's
	// records: collected at once on a big heap (membudget.Collect), the plan
	// and the walk for claims reuse their memory instead of growing the heap
	// to the pacer's goal, twice the records and those working sets.
	membudget.Collect()
	return f.plan(ids)
}

// newInferer starts an inference under cfg. Without records of the events
// (keepRecords) it can only find the evidence of pools (a streamed walk
// that looks for them).
func newInferer(cfg alloc.Config) *inferer {
	return &inferer{cfg: cfg, tree: newFreeTree(0, false),
		streams: map[uint64]uint32{}, defClass: -1,
		orderOK:   cfg.GCThreshold == 0 && cfg.MaxSplitSize == 0,
		divisions: slices.ContainsFunc(cfg.RoundupPower2Divisions[:], func(d uint32) bool { return d > 1 })}
}

// eventRecord is what labelling reads of one alloc event, in 4 bytes:
// whether it is of 8 bytes (the CUDA generator's seed and offset), and
// its stream (an index into inferer.streams). A streamed walk keeps one
// per alloc event instead of the event.
type eventRecord uint32

const (
	recSize8       eventRecord = 1
	recStreamShift             = 1
)

func (r eventRecord) stream() uint32 { return uint32(r >> recStreamShift) }

// keepRecords makes the walk keep a record of every alloc event, and what
// it learns of each (segOfAlloc, claim), for labelling; n, allocs and
// segs, the trace's events, alloc events and segment_alloc events, are
// capacity hints.
func (f *inferer) keepRecords(n, allocs, segs int) {
	f.mode = walkFull
	f.segs = make([]segmentInfo, 0, segs)
	f.claim = make(bitset, 0, (n+63)/64)
	f.rec, f.allocAt, f.segOfAlloc = make([]eventRecord, 0, allocs), make([]int32, 0, allocs), make([]int32, 0, allocs)
	f.apart.rows = make([]apartRow, 0, segs)
}

// record appends the record of the trace's next event: most events are
// only counted, inline; an alloc, and every 64th event (a word of claim
// bits), take the call.
func (f *inferer) record(e *trace.Event) {
	if e.Action != trace.ActionAlloc && f.nEvents&63 != 0 {
		f.nEvents++
		return
	}
	f.appendRecord(e)
}

// appendRecord is record past its inline part: a word of claim bits every
// 64 events, and an alloc's record.
func (f *inferer) appendRecord(e *trace.Event) {
	if f.nEvents&63 == 0 {
		f.claim = append(f.claim, 0)
	}
	if e.Action == trace.ActionAlloc {
		r := eventRecord(f.streamIndex(e.Stream)) << recStreamShift
		if e.Size == 8 {
			r |= recSize8
		}
		f.rec = append(f.rec, r)
		f.allocAt = append(f.allocAt, int32(f.nEvents))
		f.segOfAlloc = append(f.segOfAlloc, -1)
	}
	f.nEvents++
}

// streamIndex is stream's index in the records.
func (f *inferer) streamIndex(stream uint64) uint32 {
	if len(f.streams) > 0 && stream == f.lastStream {
		return f.lastStreamIdx
	}
	k, ok := f.streams[stream]
	if !ok {
		k = uint32(len(f.streams))
		f.streams[stream] = k
		f.streamIDs = append(f.streamIDs, stream)
	}
	f.lastStream, f.lastStreamIdx = stream, k
	return k
}
