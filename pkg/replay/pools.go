package replay

import (
	"slices"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// Pool is a private memory pool (a CUDA graph's, a torch.cuda.MemPool's)
// that a trace used, as the plan inferred it. Events carry no pool id, so
// membership comes from where allocations landed (docs/pytorch-allocator.md
// §19.4).
type Pool struct {
	Pool uint16   // the ops' alloc.Op.Pool
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
	release  []uint16
	poolOnly bool
	// enters: the allocations right after the run go to a private pool
	// (a graph capture or a MemPool window begins), so the run cannot be
	// a failing malloc's retry: no retry runs while a capture or a
	// MemPool window is open (docs/pytorch-allocator.md §19.5)
	enters bool
}

// poolPlan is what inference hands the plan builder.
type poolPlan struct {
	allocPool []uint16 // per event index: the pool of an alloc event
	claim     []bool   // per event index: an alloc that claims its block by address
	runs      map[int]runInfo
	pools     []Pool
}

const (
	labelUnknown = -1
	labelDefault = 0
	labelPrivate = -2 // private, pool not known yet
)

type modelBlock struct {
	addr, size uint64
	free       bool
}

type segmentInfo struct {
	addr, size, stream uint64
	small              bool
	born               int // event index
	label              int // labelUnknown, labelDefault, labelPrivate or a pool > 0
	how                string
	blocks             []modelBlock // address order
	broken             bool         // the events did not fit the block model: no evidence from it
	firstAlloc         int
	lastAlloc          int    // the event of the latest allocation in it, -1 if none
	lastAddr           uint64 // and its address
}

type inferer struct {
	cfg        alloc.Config
	events     []trace.Event // the whole trace; nil in a streamed walk
	rec        []eventRecord // per event: what the labels read of it
	streams    map[uint64]uint32
	segs       []*segmentInfo
	live       map[uint64]int // segment base → its segmentInfo
	bases      []uint64       // live bases, sorted
	free       map[freeKey][]freeEnt
	apart      map[[2]int]bool // segment pairs known to be in different pools
	runs       [][]int         // per run: the segments it freed, in order
	runAt      []int           // per run: its first event index
	runEnd     []int           // per run: its last event index
	surv       [][]int         // per run: whole-free segments it left
	segOfAlloc []int32         // per event: the segment an alloc landed in, -1
	claim      []bool
	// passed are the allocations that passed over a block best fit would
	// have taken in another segment (read as an exclusion): if labelling
	// puts both segments in one private pool after all, the allocation
	// was a claim by address (passedClaims)
	passed  []passing
	orderOK bool // no GC or max_split_size: releases free every whole segment in order
	// runStart: per run, where its global release begins; the segments
	// before it were one pool's own release (~MemPool's emptyCache)
	// just before an empty_cache(), so they share a pool (group)
	runStart  []int
	groups    [][]int     // the segments of each pool-only release
	groupOf   map[int]int // segment → its group
	divisions bool        // roundup_power2_divisions set
}

// inferPools labels every segment of the trace with its pool. final holds the
// snapshot's final segments of this device (nil when unknown).
func inferPools(events []trace.Event, final []trace.Segment, cfg alloc.Config) *poolPlan {
	for i := range events {
		if events[i].Action == trace.ActionSegmentMap || events[i].Action == trace.ActionSegmentUnmap {
			return nil // expandable segments: pools are not modelled there
		}
	}
	f := newInferer(cfg)
	f.events = events
	f.keepRecords(len(events))
	for i := range events {
		f.record(&events[i])
	}
	f.walk()
	return f.poolPlan(final)
}

// poolPlan labels the segments walked and plans their pools; nil when the
// trace shows no private pool.
func (f *inferer) poolPlan(final []trace.Segment) *poolPlan {
	ids := f.label(final)
	if ids == nil {
		return nil
	}
	return f.plan(ids)
}

// newInferer starts an inference under cfg. Without records of the events
// (keepRecords) it can only find the evidence of pools (a streamed walk
// that looks for them).
func newInferer(cfg alloc.Config) *inferer {
	return &inferer{cfg: cfg, live: map[uint64]int{}, free: map[freeKey][]freeEnt{}, apart: map[[2]int]bool{}, streams: map[uint64]uint32{},
		orderOK:   cfg.GCThreshold == 0 && cfg.MaxSplitSize == 0,
		divisions: slices.ContainsFunc(cfg.RoundupPower2Divisions[:], func(d uint32) bool { return d > 1 })}
}

// eventRecord is what labelling reads of one event, in 4 bytes: whether it is
// an alloc, whether of 8 bytes (the CUDA generator's seed and offset), and
// its stream (an index into inferer.streams). A streamed walk keeps one
// per event instead of the event.
type eventRecord uint32

const (
	recAlloc eventRecord = 1 << iota
	recSize8
	recStreamShift = iota
)

func (r eventRecord) alloc() bool    { return r&recAlloc != 0 }
func (r eventRecord) stream() uint32 { return uint32(r >> recStreamShift) }

// keepRecords makes the walk keep a record of every event, and what it
// learns of each (ofAl, claim), for labelling; n is a capacity hint.
func (f *inferer) keepRecords(n int) {
	f.rec, f.segOfAlloc, f.claim = make([]eventRecord, 0, n), make([]int32, 0, n), make([]bool, 0, n)
}

// record appends the record of the trace's next event.
func (f *inferer) record(e *trace.Event) {
	r := eventRecord(f.streamIndex(e.Stream)) << recStreamShift
	if e.Action == trace.ActionAlloc {
		r |= recAlloc
		if e.Size == 8 {
			r |= recSize8
		}
	}
	f.rec = append(f.rec, r)
	f.segOfAlloc = append(f.segOfAlloc, -1)
	f.claim = append(f.claim, false)
}

// streamIndex is stream's index in the records.
func (f *inferer) streamIndex(stream uint64) uint32 {
	k, ok := f.streams[stream]
	if !ok {
		k = uint32(len(f.streams))
		f.streams[stream] = k
	}
	return k
}
