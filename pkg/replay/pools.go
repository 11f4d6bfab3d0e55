package replay

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

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
	unknown = -1
	dflt    = 0
	private = -2 // private, pool not known yet
)

type fblock struct {
	addr, size uint64
	free       bool
}

type inst struct {
	addr, size, stream uint64
	small              bool
	born               int // event index
	label              int // unknown, dflt, private or a pool > 0
	how                string
	blocks             []fblock // address order
	broken             bool     // the events did not fit the block model: no evidence from it
	firstAlloc         int
	lastAlloc          int    // the event of the latest allocation in it, -1 if none
	lastAddr           uint64 // and its address
}

type freeKey struct {
	stream uint64
	small  bool
}

type freeEnt struct {
	size, addr uint64
	seg        int32
}

func cmpEnt(a, b freeEnt) int {
	if c := cmp.Compare(a.size, b.size); c != 0 {
		return c
	}
	return cmp.Compare(a.addr, b.addr)
}

type inferer struct {
	cfg     alloc.Config
	events  []trace.Event // the whole trace; nil in a streamed walk
	rec     []evRec       // per event: what the labels read of it
	streams map[uint64]uint32
	insts   []*inst
	live    map[uint64]int // segment base → inst
	bases   []uint64       // live bases, sorted
	free    map[freeKey][]freeEnt
	ne      map[[2]int]bool // inst pairs known to be in different pools
	runs    [][]int         // per run: the insts it freed, in order
	runAt   []int           // per run: its first event index
	runEnd  []int           // per run: its last event index
	surv    [][]int         // per run: whole-free insts it left
	ofAl    []int32         // per event: the inst an alloc landed in, -1
	claim   []bool
	orderOK bool // no GC or max_split_size: releases free every whole segment in order
	// runStart: per run, where its global release begins; the segments
	// before it were one pool's own release (~MemPool's emptyCache)
	// just before an empty_cache(), so they share a pool (group)
	runStart  []int
	groups    [][]int     // the insts of each pool-only release
	groupOf   map[int]int // inst → its group
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
	return &inferer{cfg: cfg, live: map[uint64]int{}, free: map[freeKey][]freeEnt{}, ne: map[[2]int]bool{}, streams: map[uint64]uint32{},
		orderOK:   cfg.GCThreshold == 0 && cfg.MaxSplitSize == 0,
		divisions: slices.ContainsFunc(cfg.RoundupPower2Divisions[:], func(d uint32) bool { return d > 1 })}
}

// evRec is what labelling reads of one event, in 4 bytes: whether it is
// an alloc, whether of 8 bytes (the CUDA generator's seed and offset), and
// its stream (an index into inferer.streams). A streamed walk keeps one
// per event instead of the event.
type evRec uint32

const (
	recAlloc evRec = 1 << iota
	recSize8
	recStreamShift = iota
)

func (r evRec) alloc() bool    { return r&recAlloc != 0 }
func (r evRec) stream() uint32 { return uint32(r >> recStreamShift) }

// keepRecords makes the walk keep a record of every event, and what it
// learns of each (ofAl, claim), for labelling; n is a capacity hint.
func (f *inferer) keepRecords(n int) {
	f.rec, f.ofAl, f.claim = make([]evRec, 0, n), make([]int32, 0, n), make([]bool, 0, n)
}

// record appends the record of the trace's next event.
func (f *inferer) record(e *trace.Event) {
	r := evRec(f.streamIndex(e.Stream)) << recStreamShift
	if e.Action == trace.ActionAlloc {
		r |= recAlloc
		if e.Size == 8 {
			r |= recSize8
		}
	}
	f.rec = append(f.rec, r)
	f.ofAl = append(f.ofAl, -1)
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

func (f *inferer) at(addr uint64) int {
	k := sort.Search(len(f.bases), func(i int) bool { return f.bases[i] > addr }) - 1
	if k < 0 {
		return -1
	}
	s := f.insts[f.live[f.bases[k]]]
	if addr >= s.addr+s.size {
		return -1
	}
	return f.live[f.bases[k]]
}

// round is round_size; without roundup_power2_divisions it is 512-byte
// rounding, done here rather than through cgo for every event.
func (f *inferer) round(size uint64) uint64 {
	if f.divisions {
		return alloc.RoundSize(f.cfg, size)
	}
	return max((size+511)/512*512, 512)
}

func (f *inferer) key(s *inst) freeKey { return freeKey{s.stream, s.small} }

func (f *inferer) addFree(si int, b fblock) {
	k := f.key(f.insts[si])
	e := freeEnt{b.size, b.addr, int32(si)}
	v := f.free[k]
	i, _ := slices.BinarySearchFunc(v, e, cmpEnt)
	f.free[k] = slices.Insert(v, i, e)
}

func (f *inferer) delFree(si int, b fblock) {
	k := f.key(f.insts[si])
	v := f.free[k]
	if i, ok := slices.BinarySearchFunc(v, freeEnt{b.size, b.addr, 0}, cmpEnt); ok {
		f.free[k] = slices.Delete(v, i, i+1)
	}
}

func (f *inferer) differ(x, y int) {
	if x == y {
		return
	}
	f.ne[[2]int{min(x, y), max(x, y)}] = true
}

// walk replays the events over a block model of each segment (splits and
// merges as PyTorch makes them) and collects the evidence: exclusions
// (requests that passed over a free block that best fit would have taken,
// had it been in their pool), release runs with their survivors, and
// allocations best fit cannot explain (checkpoint restores).
func (f *inferer) walk() {
	ev := f.events
	for i := 0; i < len(ev); i++ {
		i = f.step(ev, i, 0)
	}
}

// step walks ev[i], whose index in the whole trace is base+i, and returns
// the index of the last event it used (a release run takes the rest of
// its run). It looks at the events beside ev[i]: a streamed walk
// (poolWalk) holds them in its window.
func (f *inferer) step(ev []trace.Event, i, base int) int {
	e := &ev[i]
	switch e.Action {
	case trace.ActionSegmentAlloc:
		s := &inst{addr: e.Addr, size: e.Size, stream: e.Stream, born: base + i, label: unknown,
			blocks: []fblock{{e.Addr, e.Size, true}}, firstAlloc: -1, lastAlloc: -1}
		if i+1 < len(ev) && ev[i+1].Action == trace.ActionAlloc && ev[i+1].Addr == e.Addr {
			s.small = f.round(ev[i+1].Size) <= 1<<20
		} else {
			s.small = e.Size == 2<<20
		}
		f.insts = append(f.insts, s)
		si := len(f.insts) - 1
		if _, ok := f.live[e.Addr]; !ok { // else a segment we missed the free of
			k, _ := slices.BinarySearch(f.bases, e.Addr)
			f.bases = slices.Insert(f.bases, k, e.Addr)
		}
		f.live[e.Addr] = si
		f.addFree(si, s.blocks[0])
	case trace.ActionSegmentFree:
		j := i
		for j+1 < len(ev) && ev[j+1].Action == trace.ActionSegmentFree {
			j++
		}
		f.release(ev[i:j+1], base+i)
		return j
	case trace.ActionAlloc:
		f.alloc(base+i, e, i > 0 && ev[i-1].Action == trace.ActionSegmentAlloc && ev[i-1].Addr == e.Addr)
	case trace.ActionFreeCompleted:
		f.freeAt(e.Addr)
	}
	return i
}

// release walks the release run run, whose first event is the trace's
// event from.
func (f *inferer) release(run []trace.Event, from int) {
	var freed []int
	gone := map[int]bool{}
	for k := range run {
		si, ok := f.live[run[k].Addr]
		if !ok {
			continue
		}
		freed = append(freed, si)
		gone[si] = true
		s := f.insts[si]
		for _, b := range s.blocks {
			if b.free {
				f.delFree(si, b)
			}
		}
		s.blocks = nil // a freed segment's blocks are never looked at again
		delete(f.live, s.addr)
		if x, ok := slices.BinarySearch(f.bases, s.addr); ok {
			f.bases = slices.Delete(f.bases, x, x+1)
		}
	}
	var surv []int
	for _, si := range f.live {
		s := f.insts[si]
		if !gone[si] && !s.broken && len(s.blocks) == 1 && s.blocks[0].free {
			surv = append(surv, si)
		}
	}
	slices.Sort(surv)
	f.runs = append(f.runs, freed)
	f.runAt = append(f.runAt, from)
	f.runEnd = append(f.runEnd, from+len(run)-1)
	f.surv = append(f.surv, surv)
}

func (f *inferer) alloc(i int, e *trace.Event, isNew bool) {
	si := f.at(e.Addr)
	if si < 0 {
		return
	}
	if f.ofAl != nil {
		f.ofAl[i] = int32(si)
	}
	s := f.insts[si]
	if s.firstAlloc < 0 {
		s.firstAlloc = i
	}
	if s.broken {
		return
	}
	k := slices.IndexFunc(s.blocks, func(b fblock) bool { return e.Addr >= b.addr && e.Addr < b.addr+b.size })
	r := f.round(e.Size)
	chained := false
	if k >= 0 && !s.blocks[k].free && s.lastAlloc >= 0 && s.blocks[k].addr == s.lastAddr && e.Addr > s.lastAddr {
		// inside the block just allocated here: that allocation was a
		// checkpoint restore's claim, split off exactly where best fit
		// would have kept a remainder of 1 MiB or less, and so is this one
		old := s.blocks[k]
		back := fblock{e.Addr, old.addr + old.size - e.Addr, true}
		s.blocks = slices.Replace(s.blocks, k, k+1, fblock{old.addr, e.Addr - old.addr, false}, back)
		f.addFree(si, back)
		f.setClaim(s.lastAlloc)
		k++
		chained = true
	}
	if chained || (k >= 0 && s.blocks[k].free && s.blocks[k].addr == e.Addr && (r <= 1<<20) != s.small) {
		r = (e.Size + 511) / 512 * 512 // a claim takes its recorded size
	}
	if k < 0 || !s.blocks[k].free || s.blocks[k].addr+s.blocks[k].size < e.Addr+r {
		s.broken = true
		return
	}
	s.lastAlloc, s.lastAddr = i, e.Addr
	b := s.blocks[k]
	small := f.round(e.Size) <= 1<<20
	// a block that best fit would not hand out here: a claim by address
	// (CUDA graph trees restoring a checkpoint), which marks a private pool
	restore := chained || small != s.small || b.addr != e.Addr
	if !restore && !isNew {
		// a better block in the same segment means best fit was not used
		v := f.free[f.key(s)]
		lo, _ := slices.BinarySearchFunc(v, freeEnt{r, 0, 0}, cmpEnt)
		for _, c := range v[lo:] {
			if cmpEnt(c, freeEnt{b.size, b.addr, 0}) >= 0 {
				break
			}
			if int(c.seg) == si && f.usable(r, c.size) {
				restore = true
				break
			}
		}
	}
	if restore {
		f.setClaim(i)
		if s.label == unknown || s.label == dflt {
			s.label, s.how = private, howRestore
		}
	} else {
		// exclusion: every block best fit preferred lies in another pool
		v := f.free[f.key(s)]
		lo, _ := slices.BinarySearchFunc(v, freeEnt{r, 0, 0}, cmpEnt)
		for _, c := range v[lo:] {
			if !isNew && cmpEnt(c, freeEnt{b.size, b.addr, 0}) >= 0 {
				break
			}
			if f.usable(r, c.size) && int(c.seg) != si {
				f.differ(si, int(c.seg))
			}
		}
	}
	// take the block, splitting as PyTorch does
	f.delFree(si, b)
	var out []fblock
	if e.Addr > b.addr {
		out = append(out, fblock{b.addr, e.Addr - b.addr, true})
	}
	if restore { // claimed at its recorded size, split off exactly
		r = (e.Size + 511) / 512 * 512
	}
	rest := b.addr + b.size - (e.Addr + r)
	split := rest >= 512
	if !s.small && !restore {
		split = rest > 1<<20 && (f.cfg.MaxSplitSize == 0 || r < f.cfg.MaxSplitSize)
	}
	if split {
		out = append(out, fblock{e.Addr, r, false}, fblock{e.Addr + r, rest, true})
	} else {
		out = append(out, fblock{e.Addr, b.size - (e.Addr - b.addr), false})
	}
	for _, x := range out {
		if x.free {
			f.addFree(si, x)
		}
	}
	s.blocks = slices.Replace(s.blocks, k, k+1, out...)
}

// usable: best fit may hand a cached block of size to a request of r
// (max_split_size keeps oversize blocks for oversize requests).
func (f *inferer) usable(r, size uint64) bool {
	ms := f.cfg.MaxSplitSize
	if ms == 0 {
		return true
	}
	if r < ms && size >= ms {
		return false
	}
	return !(r >= ms && size >= r+f.cfg.MaxNonSplitRounding)
}

func (f *inferer) freeAt(addr uint64) {
	si := f.at(addr)
	if si < 0 {
		return
	}
	s := f.insts[si]
	if s.broken {
		return
	}
	k := slices.IndexFunc(s.blocks, func(b fblock) bool { return b.addr == addr })
	if k < 0 || s.blocks[k].free {
		s.broken = true
		return
	}
	b := fblock{addr, s.blocks[k].size, true}
	lo, hi := k, k+1
	if k > 0 && s.blocks[k-1].free {
		f.delFree(si, s.blocks[k-1])
		b.addr, b.size = s.blocks[k-1].addr, b.size+s.blocks[k-1].size
		lo = k - 1
	}
	if k+1 < len(s.blocks) && s.blocks[k+1].free {
		f.delFree(si, s.blocks[k+1])
		b.size += s.blocks[k+1].size
		hi = k + 2
	}
	s.blocks = slices.Replace(s.blocks, lo, hi, b)
	f.addFree(si, b)
}

// classKey orders segments as release_cached_blocks frees them within one
// pool: large before small, then by (stream, size, address).
func (f *inferer) classKey(si int) [4]uint64 {
	s := f.insts[si]
	c := uint64(0)
	if s.small {
		c = 1
	}
	return [4]uint64{c, s.stream, s.size, s.addr}
}

func lessKey(a, b [4]uint64) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// setClaim marks alloc event i as a claim by address (nothing to mark in
// a streamed walk, which only looks for evidence of private pools).
func (f *inferer) setClaim(i int) {
	if f.claim != nil {
		f.claim[i] = true
	}
}

// set labels segment si l, unless it has a label that says more.
func (f *inferer) set(si, l int, how string) bool {
	s := f.insts[si]
	if s.label == l || (l == private && s.label > 0) {
		return false
	}
	if s.label == unknown || (s.label == private && l > 0) {
		s.label, s.how = l, how
		return true
	}
	return false
}

// evidence labels the segments the final snapshot or the release order
// place, and returns the pools' PyTorch ids as label does; nil when
// nothing shows a private pool.
func (f *inferer) evidence(final []trace.Segment) [][2]int64 {
	ids := [][2]int64{{0, 0}}
	idOf := map[[2]int64]int{{0, 0}: 0}
	// E1: the final segments name their pools
	for _, fs := range final {
		si, ok := f.live[fs.Address]
		if !ok {
			continue
		}
		l, ok := idOf[fs.PoolID]
		if !ok {
			l = len(ids)
			ids = append(ids, fs.PoolID)
			idOf[fs.PoolID] = l
		}
		f.insts[si].label, f.insts[si].how = l, howSnapshot
	}
	// E4: a global release frees default large, default small, then the
	// released pools' small and large segments; where that order breaks,
	// private segments begin
	f.runStart = make([]int, len(f.runs))
	f.groupOf = map[int]int{}
	if f.orderOK {
		for r, run := range f.runs {
			k := orderBreak(f, run)
			if k < 0 {
				continue
			}
			if f.poolThenGlobal(run, k) {
				// one pool's own release, then empty_cache()'s
				f.runStart[r] = k
				for _, si := range run[:k] {
					f.set(si, private, howOrder)
					f.groupOf[si] = len(f.groups)
				}
				f.groups = append(f.groups, run[:k])
				// the global part in order is the default pools' (a
				// freeable pool's segments follow where the order breaks)
				end := len(run)
				if k2 := orderBreak(f, run[k:]); k2 >= 0 {
					end = k + k2
				}
				for _, si := range run[k:end] {
					f.set(si, dflt, howOrder)
				}
				if k = end; k == len(run) {
					continue
				}
			}
			for _, si := range run[k:] {
				f.set(si, private, howOrder)
			}
		}
	}
	// any private label or exclusion: a trace of the default pool alone
	// shows none
	evidence := len(ids) > 1 || len(f.ne) > 0
	for _, s := range f.insts {
		evidence = evidence || s.label == private
	}
	if !evidence {
		return nil
	}
	return ids
}

// orderBreak is the first index of run whose segment sorts before the one
// before it (classKey), -1 when the run is in order.
func orderBreak(f *inferer, run []int) int {
	for k := 1; k < len(run); k++ {
		if lessKey(f.classKey(run[k]), f.classKey(run[k-1])) {
			return k
		}
	}
	return -1
}

// poolThenGlobal says whether a run whose order breaks at k reads better as
// one pool's own release (run[:k], one class: ~MemPool's emptyCache frees
// the pool's small, then large segments) followed at once by a global one
// (run[k:], in order from large to small: the default pools) than as a
// global release followed by released pools' segments from k on: those
// would free a pool's small segments before its large ones, and run[k:]
// frees large before small.
func (f *inferer) poolThenGlobal(run []int, k int) bool {
	small := func(si int) bool { return f.insts[si].small }
	for _, si := range run[1:k] {
		if small(si) != small(run[0]) {
			return false
		}
	}
	rest := run[k:]
	if orderBreak(f, rest) >= 0 || small(rest[0]) {
		return false
	}
	return small(rest[len(rest)-1])
}

// label assigns every segment a pool. It returns the PyTorch ids of the
// pools (index = label), or nil when the trace shows no private pool.
func (f *inferer) label(final []trace.Segment) [][2]int64 {
	ids := f.evidence(final)
	if ids == nil {
		return nil
	}
	ne, neOf := f.exclusions()
	f.propagate(ne, neOf)
	// private segments of unknown pool, in the order they were made: the
	// pool of the nearest private allocation on the stream, else the pool
	// inferred last; a pool an exclusion rules out (a request passed
	// over a free block of it) is skipped for the next choice, and a new
	// pool inferred when none is left. A pool-only release's segments
	// share their pool.
	inferred := 0 // the last inferred pool's label
	for si, s := range f.insts {
		if s.label != private {
			continue
		}
		members := []int{si}
		if g, ok := f.groupOf[si]; ok {
			members = slices.DeleteFunc(slices.Clone(f.groups[g]), func(m int) bool { return f.insts[m].label != private })
		}
		excluded := map[int]bool{}
		for _, m := range members {
			for _, o := range neOf[m] {
				if l := f.insts[o].label; l > 0 {
					excluded[l] = true
				}
			}
		}
		l := f.nearestPool(si)
		if l <= 0 || excluded[l] {
			l = inferred
		}
		if l <= 0 || excluded[l] {
			ids = append(ids, [2]int64{})
			l, inferred = len(ids)-1, len(ids)-1
		}
		for _, m := range members {
			f.insts[m].label = l
		}
	}
	return ids
}

// propagate labels the segments evidence left unknown, by three rules
// applied until none changes a label: order within release runs (before
// a default segment, default; after a private one, private), exclusions
// (a pair known to be in different pools), and survivors of a global
// release (a whole-free segment it left is private). Where the rules say
// nothing more, the first unlabeled segment takes the label of the nearest
// labeled allocation on its stream (continuity), and the rules go on.
//
// Labels only ever get set (unknown, then default or private, then a
// pool), so the rules are applied again only where a label changed: a
// queue of changed segments, each rechecking its runs and exclusions.
// Where a broken trace makes labels contradict, the first set wins; the
// queue's order is fixed, so the result is too.
func (f *inferer) propagate(ne [][2]int, neOf [][]int32) {
	runsOf := make([][]int32, len(f.insts))
	for r, run := range f.runs {
		for _, si := range run {
			runsOf[si] = append(runsOf[si], int32(r))
		}
	}
	var queue []int
	set := func(si, l int, how string) {
		if f.set(si, l, how) {
			queue = append(queue, si)
		}
	}
	order := func(r int) {
		run := f.runs[r][f.runStart[r]:]
		lastD, firstP := -1, len(run)
		for k, si := range run {
			if f.insts[si].label == dflt {
				lastD = k
			}
			if l := f.insts[si].label; (l == private || l > 0) && k < firstP {
				firstP = k
			}
		}
		for k := 0; k < lastD; k++ {
			set(run[k], dflt, howOrder)
		}
		for k := firstP + 1; k < len(run); k++ {
			set(run[k], private, howOrder)
		}
		if f.orderOK && (lastD >= 0 || f.runStart[r] > 0) { // a global release
			for _, si := range f.surv[r] {
				set(si, private, howOrder)
			}
		}
	}
	exclude := func(x, y int) { // y's label from x's
		switch l := f.insts[x].label; {
		case l == dflt:
			set(y, private, howExclusion)
		case l == private || l > 0:
			set(y, dflt, howExclusion)
		}
	}
	for r := range f.runs {
		order(r)
	}
	for _, p := range ne {
		exclude(p[0], p[1])
		exclude(p[1], p[0])
	}
	next := 0 // segments before it are labeled: labels are never unset
	for {
		for len(queue) > 0 {
			si := queue[0]
			queue = queue[1:]
			for _, r := range runsOf[si] {
				order(int(r))
			}
			for _, o := range neOf[si] {
				exclude(si, int(o))
				exclude(int(o), si)
			}
		}
		for next < len(f.insts) && f.insts[next].label != unknown {
			next++
		}
		if next == len(f.insts) {
			return
		}
		l := f.nearest(next)
		if f.rngPair(next) {
			l = dflt
		}
		set(next, l, howContinuity)
	}
}

// exclusions are the pairs of segments known to be in different pools, in
// one order (a map's would differ from run to run), and each segment's
// partners.
func (f *inferer) exclusions() (ne [][2]int, neOf [][]int32) {
	ne = slices.SortedFunc(maps.Keys(f.ne), func(a, b [2]int) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	neOf = make([][]int32, len(f.insts))
	for _, p := range ne {
		neOf[p[0]] = append(neOf[p[0]], int32(p[1]))
		neOf[p[1]] = append(neOf[p[1]], int32(p[0]))
	}
	return ne, neOf
}

// nearest is the label of the labeled allocation closest in event order to
// segment si's first allocation on its stream; default when there is none.
func (f *inferer) nearest(si int) int {
	s := f.insts[si]
	at := s.firstAlloc
	if at < 0 {
		at = s.born
	}
	n, stream := len(f.rec), f.streamIndex(s.stream)
	for d := 1; d < n; d++ {
		for _, j := range []int{at - d, at + d} {
			if j < 0 || j >= n || !f.rec[j].alloc() || f.rec[j].stream() != stream || f.rngAlloc(j) {
				continue
			}
			if o := f.ofAl[j]; o >= 0 && int(o) != si {
				if l := f.insts[o].label; l != unknown {
					if l > 0 {
						return private
					}
					return l
				}
			}
		}
		if at-d < 0 && at+d >= n {
			break
		}
	}
	return dflt
}

// rngPair: segment si was made for the CUDA generator's seed and offset
// (two 8-byte tensors allocated back to back on the capture stream before
// capture_begin): default pool, although private allocations follow it.
func (f *inferer) rngPair(si int) bool {
	i := f.insts[si].firstAlloc
	return i >= 0 && i+1 < len(f.rec) && f.rngAlloc(i) && int(f.ofAl[i+1]) == si
}

// rngAlloc: alloc event j is one of such a pair. It says nothing of the
// pool the allocations around it were routed to.
func (f *inferer) rngAlloc(j int) bool {
	rec := f.rec
	const seed = recAlloc | recSize8
	pair := func(a, b int) bool {
		return a >= 0 && b < len(rec) && rec[a]&seed == seed && rec[b]&seed == seed && rec[a].stream() == rec[b].stream()
	}
	return pair(j, j+1) || pair(j-1, j)
}

// nearestPool is the pool of the nearest allocation on si's stream that
// landed in a segment of a known private pool, 0 when none.
func (f *inferer) nearestPool(si int) int {
	s := f.insts[si]
	at := max(s.firstAlloc, s.born)
	n := len(f.rec)
	for d := 1; d < n; d++ {
		for _, j := range []int{at - d, at + d} {
			if j < 0 || j >= n || !f.rec[j].alloc() {
				continue
			}
			if o := f.ofAl[j]; o >= 0 && f.insts[o].label > 0 && f.insts[o].stream == s.stream {
				return f.insts[o].label
			}
		}
		if at-d < 0 && at+d >= n {
			break
		}
	}
	return 0
}

// plan turns the labels into what the plan builder needs.
func (f *inferer) plan(ids [][2]int64) *poolPlan {
	pp := &poolPlan{allocPool: make([]uint16, len(f.ofAl)), claim: f.claim, runs: map[int]runInfo{}}
	pools := make([]Pool, len(ids))
	hows := make([]map[string]bool, len(ids))
	for l := range pools {
		pools[l] = Pool{Pool: uint16(l), ID: ids[l], Released: -1}
		hows[l] = map[string]bool{}
	}
	for _, s := range f.insts {
		if s.label > 0 {
			pools[s.label].Segments++
			hows[s.label][s.how] = true
		}
	}
	for i, o := range f.ofAl {
		if o >= 0 && f.insts[o].label > 0 {
			pp.allocPool[i] = uint16(f.insts[o].label)
			pools[f.insts[o].label].Allocs++
		}
	}
	// a pool is released before the first run that frees one of its
	// segments (and after its last allocation: labels that say otherwise
	// are wrong somewhere, and the pool is released at a later run); a run
	// that frees only private segments while a default whole-free segment
	// survives is ~MemPool's own emptyCache
	last := map[int]int{}
	for i, o := range f.ofAl {
		if o >= 0 && f.insts[o].label > 0 {
			last[f.insts[o].label] = i
		}
	}
	released := map[int]bool{}
	for r, run := range f.runs {
		var ri runInfo
		onlyPrivate := len(run) > 0
		for _, si := range run {
			l := f.insts[si].label
			if l <= 0 {
				onlyPrivate = false
				continue
			}
			if !released[l] && last[l] < f.runAt[r] {
				released[l] = true
				ri.release = append(ri.release, uint16(l))
			}
		}
		if onlyPrivate {
			ri.poolOnly = slices.ContainsFunc(f.surv[r], func(si int) bool { return f.insts[si].label == dflt })
		}
		ri.enters = f.entersPool(r)
		if len(ri.release) > 0 || ri.poolOnly || ri.enters {
			pp.runs[f.runAt[r]] = ri
		}
	}
	for l := 1; l < len(pools); l++ {
		for h := range hows[l] {
			pools[l].How = append(pools[l].How, h)
		}
		sort.Strings(pools[l].How)
		if pools[l].Segments > 0 {
			pp.pools = append(pp.pools, pools[l])
		}
	}
	return pp
}

// entersPool says whether release run r is followed at once by an
// allocation routed to a private pool: torch.cuda.graph's capture starts
// with torch.cuda.empty_cache(), and its first allocations (after the CUDA
// generator's seed and offset, default-pool) go to the graph's pool. A
// failing malloc never retries while a capture or MemPool window is open,
// so such a run is an empty_cache() whatever the reserved bytes say.
// Garbage collection (which frees default segments before any malloc's
// first attempt) and max_split_size's release of the request's own
// pool's oversize segments (a run of private segments alone) can still
// precede a private allocation: those runs are left to the peak test.
func (f *inferer) entersPool(r int) bool {
	if f.cfg.GCThreshold > 0 {
		return false
	}
	if f.cfg.MaxSplitSize > 0 && !slices.ContainsFunc(f.runs[r], func(si int) bool { return f.insts[si].label == dflt }) {
		return false
	}
	// the segment the next request made and the generator's pair come
	// between; anything else ends the look
	const within = 6
	for j := f.runEnd[r] + 1; j < len(f.rec) && j <= f.runEnd[r]+within; j++ {
		if !f.rec[j].alloc() || f.rngAlloc(j) {
			continue
		}
		o := f.ofAl[j]
		return o >= 0 && f.insts[o].label > 0
	}
	return false
}

// String describes a pool in one line, for reports.
func (p Pool) String() string {
	id := "id unknown"
	if p.ID != [2]int64{} {
		id = fmt.Sprintf("id (%d,%d)", p.ID[0], p.ID[1])
	}
	rel := "alive at the end"
	if p.Released >= 0 {
		rel = fmt.Sprintf("released before event %d", p.Released)
	}
	return fmt.Sprintf("private pool %d (%s): %d segments, %d allocations, %s; inferred from %s",
		p.Pool, id, p.Segments, p.Allocs, rel, strings.Join(p.How, ", "))
}
