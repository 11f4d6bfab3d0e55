package pipeline

import (
	"encoding/binary"
	"slices"
	"sort"
	"strconv"

	"github.com/gpumem/gpumem/internal/categories"
	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
	"github.com/gpumem/gpumem/pkg/trace"
)

// stepOpts is what one device's stepped replay is for beyond the explorer.
type stepOpts struct {
	device int
	plan   *replay.Plan
	o      replay.Options
	res    *replay.Result
	snap   *trace.Snapshot    // the stacks and annotations; nil for workloads
	clock  *clock             // the ops' recorded times; nil when none
	cls    *categories.Result // the allocations' categories; nil when none
	// peakN > 0 takes the segments and the allocation sites live after the
	// first peakN ops, into peak and sites (reached says it got there).
	peakN   int
	peak    []figures.SegmentMap
	sites   []figures.Site
	reached bool
	// finish completes the head (verdict, a workload's phases) before the
	// sink's Finish.
	finish func(e *figures.Explorer)
}

// liveAlloc is an allocation whose block is still held.
type liveAlloc struct {
	k     int32 // its index among the explorer's allocations
	size  uint64
	stack int32 // its stack (-1 none), for the sites at the peak
	ended bool  // freed (its block may still wait for another stream)
	made  bool  // made by an op, not a seed
	cat   uint8 // its category, when there are categories
	ok    bool  // in the set
}

// liveSet holds the allocations whose blocks are held, by id: a slice
// for the small ids a plan reuses (looked up for every block an op
// changes), a map for the rest; and beside them, in ix, each one's k, for
// a sink that looks up the blocks' allocations itself
// (figures.ExplorerFlatSink).
type liveSet struct {
	dense  []liveAlloc
	sparse map[uint32]*liveAlloc
	ix     figures.AllocIndex
}

// denseIDs is the most ids liveSet keeps in its slice.
const denseIDs = figures.DenseIDs

// get is id's allocation, in place (nil when none): valid until the next
// put or del.
func (l *liveSet) get(id uint32) *liveAlloc {
	if id < denseIDs {
		if int(id) < len(l.dense) && l.dense[id].ok {
			return &l.dense[id]
		}
		return nil
	}
	return l.sparse[id]
}

// put puts id's allocation, the explorer's k-th, in the set, zero but for
// k, for the caller to fill in place: a value built apart and copied in
// would be reread in 16-byte words that stall on its narrow stores (store
// forwarding), for every allocation.
func (l *liveSet) put(id uint32, k int32) *liveAlloc {
	if p := l.putDense(id, k); p != nil {
		return p
	}
	return l.putSlow(id, k)
}

// putDense is put's common case, nil when id is past dense: small
// enough to inline where every allocation passes (step), which calls
// putSlow itself when it is nil.
func (l *liveSet) putDense(id uint32, k int32) *liveAlloc {
	if int(id) >= len(l.dense) || int(id) >= len(l.ix.Dense) {
		return nil
	}
	l.ix.Dense[id] = k + 1
	p := &l.dense[id]
	p.k, p.size, p.stack, p.ended, p.made, p.cat, p.ok = k, 0, 0, false, false, 0, true
	return p
}

// putSlow is put for an id past dense: dense grown to it, or the map.
func (l *liveSet) putSlow(id uint32, k int32) *liveAlloc {
	if id < denseIDs {
		for int(id) >= len(l.dense) {
			l.dense = append(l.dense, liveAlloc{})
			l.ix.Dense = append(l.ix.Dense, 0) // as long as dense
		}
		l.ix.Dense[id] = k + 1
		p := &l.dense[id]
		*p = liveAlloc{k: k, ok: true}
		return p
	}
	if l.sparse == nil {
		l.sparse, l.ix.Sparse = map[uint32]*liveAlloc{}, map[uint32]int32{}
	}
	p := &liveAlloc{k: k, ok: true}
	l.sparse[id], l.ix.Sparse[id] = p, k
	return p
}

func (l *liveSet) del(id uint32) {
	if id < denseIDs {
		if int(id) < len(l.dense) {
			l.dense[id] = liveAlloc{}
			l.ix.Dense[id] = 0
		}
		return
	}
	delete(l.sparse, id)
	delete(l.ix.Sparse, id)
}

// explore steps through one device's plan, one op at a time, and hands
// sink what the HTML report's explorer draws: the allocations' lifetimes
// from the ops, and each op's block-level change, each step's blocks
// compared with the last, with a key of the whole list now and then. It
// keeps only the live blocks and allocations: the sink packs the rest as
// it comes.
func explore(sink figures.ExplorerSink, s *stepOpts) error {
	for {
		err := exploreOnce(sink, s)
		if err == nil {
			err = sink.Finish()
		}
		if err != figures.ErrExplorerAgain {
			return err
		}
	}
}

func exploreOnce(sink figures.ExplorerSink, s *stepOpts) error {
	plan, res := s.plan, s.res
	x := startExplorer(sink, s, shownOf(res))
	defer x.bs.Free()
	n := x.n
	o := s.o
	o.Points, o.Check = 0, false
	x.firstOp = min(max(1, res.Extra.PeakOp+1), n)
	if res.OOM != nil {
		x.firstOp = min(max(1, res.OOMOp+1), n)
	}
	// the allocator's state is at hand at these ops: the peak's, and those
	// after which the page's first segment map may show (the peak's, the
	// out-of-memory's, the first and the last)
	pauses := []int{0, n - 1, res.Extra.PeakOp, s.peakN - 1}
	if res.OOM != nil {
		pauses = append(pauses, res.OOMOp)
	}
	// a key once the changes since the last one hold as many blocks as the
	// list: keys at most double the data, and the page applies at most that
	// many blocks' worth of changes to reach any op
	err := replay.StepBlocks(plan, o, &x.bs, minKeyGap, pauses, x.step)
	if err != nil {
		return err
	}
	x.end()
	return nil
}

// shown is what the explorer shows of a replay: its first n ops, its
// reserved peak, and its out-of-memory (oomOp -1 and oom nil when none).
type shown struct {
	n, peakOp, oomOp int
	oom              *alloc.OOM
}

// shownOf is what the explorer shows of the replay that ended in res.
func shownOf(res *replay.Result) shown {
	if res.OOM != nil {
		return shown{n: res.OOMOp + 1, peakOp: res.Extra.PeakOp, oomOp: res.OOMOp, oom: res.OOM} // the failing op, after its release steps
	}
	return shown{n: res.Done, peakOp: res.Extra.PeakOp, oomOp: -1}
}

// startExplorer starts the sink on the explorer of s's replay, showing
// sh, and hands it the seeds: what the stepping needs before the first op.
func startExplorer(sink figures.ExplorerSink, s *stepOpts, sh shown) *opStepper {
	plan, snap, n := s.plan, s.snap, sh.n
	e := &figures.Explorer{Device: s.device, Ops: n, PeakOp: sh.peakOp, OOMOp: -1}
	if sh.oom != nil {
		e.OOMOp, e.OOMSize, e.OOMRounded = sh.oomOp, sh.oom.Size, sh.oom.Rounded
	}
	if snap != nil && len(snap.Stacks) > 0 {
		e.Stacks, e.Frames, e.User = internFrames(snap.Stacks)
	}
	if s.cls != nil {
		for c := categories.Category(0); c < categories.NumCategories; c++ {
			e.Categories = append(e.Categories, c.String())
		}
	}
	timed := s.clock != nil && n > 0
	seeds := 0
	for _, sd := range plan.Seeds {
		seeds += len(sd.Blocks)
	}
	sink.Start(figures.ExplorerStart{Head: e, Timed: timed, Allocs: seeds + allocOps(plan, sh, n),
		Sizes: func(yield func(uint64)) error {
			for _, sd := range plan.Seeds {
				for _, b := range sd.Blocks {
					yield(max(b.Requested, b.Size))
				}
			}
			i := 0
			return plan.Each(func(_ int, ops []alloc.Op, _, _ []int32) error {
				for _, op := range ops {
					if i < n && op.Kind == alloc.OpAlloc && i != sh.oomOp {
						yield(op.Size)
					}
					i++
				}
				return nil
			})
		}})
	// what each category holds, sampled as the ops go: the op of each
	// stride where the most was live
	x := &opStepper{s: s, e: e, sink: sink, n: n, oomOp: sh.oomOp, steps: max(n, s.peakN), timed: timed, live: &liveSet{}, firstOp: -1}
	x.flatSink, _ = sink.(figures.ExplorerFlatSink)
	x.stride = max(1, (n+seriesPoints-1)/seriesPoints)
	x.toPoint = x.stride
	x.bestOp, x.bestTotal = -1, -1
	for _, sd := range plan.Seeds {
		for _, b := range sd.Blocks {
			a := figures.Lifetime{Start: 0, End: int32(n), Released: int32(n),
				Size: max(b.Requested, b.Size), Address: sd.Address + b.Offset, Stream: sd.Stream, Stack: -1}
			if s.cls != nil {
				c := categories.Unknown
				if blk, ok := s.cls.Lookup(-1, a.Address); ok {
					c = blk.Category
				}
				a.Category = uint8(c) + 1
				x.addCat(c, int64(a.Size))
			}
			l := x.live.put(b.ID, x.nk)
			l.size, l.stack, l.cat = a.Size, -1, a.Category-1
			x.made = a
			sink.Alloc(x.nk, &x.made)
			x.nk++
		}
	}
	// the annotations' times, in order, to find the op each falls at
	if snap != nil && timed {
		for k, a := range snap.Annotations {
			if a.Device == s.device {
				x.ann = append(x.ann, k)
			}
		}
		ann := x.ann
		sort.SliceStable(ann, func(i, j int) bool { return snap.Annotations[ann[i]].TimeUS < snap.Annotations[ann[j]].TimeUS })
		x.annOp = make([]int, len(ann))
	}
	if s.peakN > 0 && snap != nil {
		x.allocated = map[uint32]siteAlloc{}
	}
	if s.cls != nil {
		x.byEvent = s.cls.InOrder()
		if oneForOne(plan, s.cls) {
			x.born = s.cls
		}
	}
	s.reached = false
	if s.clock != nil {
		s.clock.rewind()
	}
	return x
}

// end completes the head once the ops are stepped: the annotations'
// spans, then s.finish's part.
func (x *opStepper) end() {
	s, e, n, snap := x.s, x.e, x.n, x.s.snap
	if snap != nil && x.timed {
		at := make([]int, len(snap.Annotations)) // the op each of this device's annotations falls at
		for j, k := range x.ann {
			at[k] = n
			if j < x.nextAnn {
				at[k] = x.annOp[j]
			}
		}
		e.Spans = spans(snap.Annotations, s.device, at)
	}
	if s.finish != nil {
		s.finish(e)
	}
}

// siteAlloc is an allocation still allocated (not freed), for the sites
// at the peak.
type siteAlloc struct {
	stack int32
	size  uint64
}

// opStepper is one stepped replay of exploreOnce: what it keeps from op
// to op, in one struct, so that step, called for every op, reads only
// the fields it uses.
type opStepper struct {
	s        *stepOpts
	e        *figures.Explorer
	sink     figures.ExplorerSink
	flatSink figures.ExplorerFlatSink // sink, when it takes an op's blocks flat; nil otherwise
	n        int                      // the ops the explorer shows
	oomOp    int                      // the failing op, -1 none
	steps    int                      // the ops stepped: n, or to the peak of s.peakN
	// firstOp: after op firstOp-1 the sink is handed the list (First);
	// -1 when the peak is known only at the end (peak)
	firstOp int
	peak    *peakTrack // nil unless firstOp is -1
	timed   bool
	live    *liveSet
	nk      int32 // the allocations made so far
	// what each category holds (cur, total), and the op of the stride
	// where the most was live
	cur             [categories.NumCategories]int64
	total           int64
	best            [categories.NumCategories]int64
	bestOp          int
	bestTotal       int64
	stride, toPoint int   // toPoint: ops left to the end of the stride
	ann, annOp      []int // this device's annotations by time, and the op each falls at
	nextAnn         int
	last            int64 // the last op's time: times are kept monotonic
	allocated       map[uint32]siteAlloc
	byEvent         func(int32) (categories.Category, bool) // the allocations' events come in order
	// born, when not nil, gives the category of the plan's k-th
	// allocation (the recorded out-of-memory errors' aside) as its k-th
	// born block (oneForOne), counted by nborn while the steps come one
	// op after another from op 0 (nextOp); byEvent otherwise
	born           *categories.Result
	nborn, nextOp  int
	bs             alloc.BlockSteps
	flat           []alloc.FlatBlock
	ins, wholeRecs []figures.BlockRec // reused: a sink sees them only during its call
	made           figures.Lifetime   // what the sink's Alloc sees, by pointer: no copy of it to stall on
}

func (x *opStepper) addCat(c categories.Category, size int64) {
	if x.s.cls != nil {
		x.cur[c] += size
		x.total += size
	}
}

func (x *opStepper) validStack(st int32) int32 {
	if snap := x.s.snap; snap != nil && st >= 0 && int(st) < len(snap.Stacks) {
		return st
	}
	return -1
}

// whole is the whole list after the op at hand: its key, or, where the
// allocator is at hand (at not nil), the list kept.
func (x *opStepper) whole(key []alloc.FlatBlock, at *alloc.Allocator) []figures.BlockRec {
	list := key
	if list == nil && at != nil {
		x.flat = x.bs.Blocks(x.flat[:0])
		list = x.flat
	}
	x.wholeRecs = records(x.wholeRecs[:0], list, x.live)
	return x.wholeRecs
}

// step hands the sink op st.I's allocation, free and change.
func (x *opStepper) step(st *replay.BlockStep) bool {
	s, n, i, op, bc, a := x.s, x.n, st.I, &st.Op, st.Change, st.At
	if i >= x.steps {
		return false
	}
	if i != x.nextOp {
		x.born = nil // not every op stepped: count no further
	}
	x.nextOp = i + 1
	if x.allocated != nil || i == s.peakN-1 {
		x.toPeak(st)
	}
	if i >= n {
		return true
	}
	live := x.live
	made := &x.made // filled in place, for the sink's Alloc
	var madeCat categories.Category
	var madeK int32 = -1
	var freed, released *liveAlloc
	switch op.Kind {
	case alloc.OpAlloc:
		if i == x.oomOp {
			break // the failing request holds no block
		}
		stack := x.validStack(st.Stack)
		made.Start, made.End, made.Released = int32(i), int32(n), int32(n)
		made.Size, made.Address, made.Stream, made.Stack, made.Category = op.Size, 0, op.Stream, stack, 0
		if s.cls != nil {
			madeCat = categories.Unknown
			if op.Flags&alloc.FlagRecordedOOM == 0 {
				if x.born != nil {
					madeCat = x.born.BornCategory(x.nborn)
					x.nborn++
				} else if c, ok := x.byEvent(st.Event); ok {
					madeCat = c
				}
			}
			made.Category = uint8(madeCat) + 1
		}
		madeK = x.nk
		l := live.putDense(op.ID, madeK)
		if l == nil {
			l = live.putSlow(op.ID, madeK)
		}
		l.size, l.stack, l.made, l.cat = op.Size, made.Stack, true, uint8(madeCat)
		x.nk++
	case alloc.OpFree, alloc.OpFreeRequest:
		if l := live.get(op.ID); l != nil && !l.ended {
			l.ended = true
			freed = l
			if s.cls != nil {
				x.cur[l.cat] -= int64(l.size)
				x.total -= int64(l.size)
			}
			if x.peak != nil && l.made {
				x.peak.sites.add(l.stack, -1, int64(l.size))
			}
		}
	}
	if op.Kind == alloc.OpFreeComplete || op.Kind == alloc.OpFree {
		released = live.get(op.ID)
	}
	var c figures.Change // the change as records, for a sink that takes no flat blocks
	if x.flatSink == nil {
		c = figures.Change{Pos: int32(bc.Pos), Del: int32(bc.Del), Ins: records(x.ins[:0], bc.Ins, live)}
		x.ins = c.Ins
	}
	if madeK >= 0 {
		// the block the op made for its allocation: used, under its id
		for j := range bc.Ins {
			if b := &bc.Ins[j]; b.ID == op.ID && b.State == alloc.BlockAllocated { // not a copy of the block
				made.Address = b.Address
				break
			}
		}
		x.sink.Alloc(madeK, made)
		x.addCat(madeCat, int64(made.Size))
	}
	if freed != nil {
		x.sink.Freed(freed.k, int32(i), freed.size)
	}
	if released != nil {
		x.sink.Released(released.k, int32(i))
		live.del(op.ID)
	}

	var t int64
	if x.timed {
		t = max(s.clock.at(st.Event), x.last)
		x.last = t
		for ann := s.snap.Annotations; x.nextAnn < len(x.ann) && ann[x.ann[x.nextAnn]].TimeUS <= t; x.nextAnn++ {
			x.annOp[x.nextAnn] = i
		}
	}
	if x.flatSink != nil {
		x.flatSink.OpFlat(i, t, int32(bc.Pos), int32(bc.Del), bc.Ins, &live.ix)
	} else {
		x.sink.Op(i, t, c)
	}
	if bc.Whole != nil {
		x.sink.Key(i+1, x.whole(bc.Whole, a))
	}
	if i+1 == x.firstOp {
		x.sink.First(i+1, x.whole(bc.Whole, a))
	}
	if x.peak != nil {
		if madeK >= 0 {
			x.peak.sites.add(made.Stack, 1, int64(made.Size))
		}
		x.peak.step(i, bc, live)
	}
	if s.cls != nil {
		if x.total > x.bestTotal {
			// a word at a time: the array copied whole would be reread
			// in 16-byte words that stall on the 8-byte stores of cur
			for c := range x.cur {
				x.best[c] = x.cur[c]
			}
			x.bestOp, x.bestTotal = i, x.total
		}
		x.toPoint--
		if x.toPoint == 0 || i == n-1 {
			x.point()
		}
	}
	return true
}

// toPeak is step's part for the segments and the allocation sites at
// the peak, up to op s.peakN-1, kept apart from the path every op takes.
func (x *opStepper) toPeak(st *replay.BlockStep) {
	s, op := x.s, &st.Op
	if x.allocated != nil {
		switch op.Kind {
		case alloc.OpAlloc:
			x.allocated[op.ID] = siteAlloc{x.validStack(st.Stack), op.Size}
		case alloc.OpFree, alloc.OpFreeRequest:
			delete(x.allocated, op.ID) // no longer allocated, even if still pending
		}
	}
	if st.I == s.peakN-1 {
		s.reached = true
		s.peak = segmentMaps(st.At.Snapshot())
		if x.allocated != nil {
			s.sites = sitesOf(s.snap, func(yield func(st int32, size uint64)) {
				for _, v := range x.allocated {
					yield(v.stack, v.size)
				}
			})
			x.allocated = nil // past the peak, no longer needed
		}
	}
}

// point ends a stride of the categories' series: its point is the op
// where the most was live.
func (x *opStepper) point() {
	x.toPoint = x.stride
	p := figures.CategoryPoint{Op: x.bestOp, Bytes: make([]uint64, len(x.best))}
	for c, v := range x.best {
		p.Bytes[c] = uint64(max(v, 0))
	}
	x.e.CategorySeries = append(x.e.CategorySeries, p)
	x.bestTotal = -1
}

// allocOps counts the allocations the first n ops of plan make: every
// OpAlloc but the one that failed. A replay that went through the whole
// plan makes them all: the plan's count, no pass over its ops.
func allocOps(plan *replay.Plan, sh shown, n int) int {
	if sh.oomOp < 0 && n == plan.Len() {
		return plan.Allocs()
	}
	count, i := 0, 0
	_ = plan.Each(func(_ int, ops []alloc.Op, _, _ []int32) error {
		for _, op := range ops {
			if i < n && op.Kind == alloc.OpAlloc && i != sh.oomOp {
				count++
			}
			i++
		}
		return nil
	})
	return count
}

// minKeyGap is the fewest ops between two keyframes of the block list.
const minKeyGap = 1024

// records appends the explorer's records of blocks to dst: an
// allocation id names one allocation from one op to the next, so a used
// block's record names the allocation live under its id.
func records(dst []figures.BlockRec, blocks []alloc.FlatBlock, live *liveSet) []figures.BlockRec {
	n := len(dst)
	dst = slices.Grow(dst, len(blocks))[:n+len(blocks)]
	for j := range blocks {
		// not copies: a million ops' blocks pass here; and each field
		// stored in place, as a record built apart and then copied is
		// reread in 16-byte words that stall on its narrow stores
		b, r := &blocks[j], &dst[n+j]
		r.Address, r.Size, r.SegSize, r.First = b.Address, b.Size, b.SegSize, b.SegSize != 0
		st := figures.StateFree
		switch {
		case b.State == alloc.BlockAllocated:
			st = figures.StateAllocated
		case b.State == alloc.BlockPendingFree:
			st = figures.StatePending
		case b.SegBlocks > 1:
			st = figures.StateSplit
		}
		r.State, r.Alloc = st, -1
		if st >= figures.StateAllocated {
			if l := live.get(b.ID); l != nil {
				r.Alloc = l.k
			}
		}
	}
	return dst
}

// Two blocks of consecutive ops are one unchanged block when their
// address, size, segment size, allocation id and state are the same
// (alloc.BlockSteps compares them so). A block's segment gaining or
// losing other blocks does not change it: only a free block's colour
// depends on that, and a whole free segment's only block changes when the
// segment splits.
// internFrames writes each distinct frame once.
func internFrames(stacks [][]trace.Frame) ([][]int32, []string, []bool) {
	idx := map[trace.Frame]int32{}
	var frames []string
	var user []bool
	out := make([][]int32, len(stacks))
	for i, st := range stacks {
		out[i] = make([]int32, len(st))
		for j, f := range st {
			k, ok := idx[f]
			if !ok {
				k = int32(len(frames))
				idx[f] = k
				frames = append(frames, f.Name+" ("+f.Filename+":"+strconv.Itoa(f.Line)+")")
				user = append(user, userFrame(f))
			}
			out[i][j] = k
		}
	}
	return out, frames, user
}

// spans turns one device's record_function annotations into op ranges: a
// START and the END of the same name that follows it make one span. at
// is the op each annotation falls at: the first whose time is not before
// it.
func spans(ann []trace.Annotation, device int, at []int) []figures.Span {
	open := map[string][]int{}
	var out []figures.Span
	for k, a := range ann {
		if a.Device != device {
			continue
		}
		name := a.Fields["name"]
		switch a.Fields["stage"] {
		case "START":
			open[name] = append(open[name], at[k])
		case "END":
			if st := open[name]; len(st) > 0 {
				out = append(out, figures.Span{Name: name, Start: st[len(st)-1], End: at[k]})
				open[name] = st[:len(st)-1]
			}
		default:
			out = append(out, figures.Span{Name: name, Start: at[k], End: at[k]})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// opTimes is the recorded time of each op of plan: that of the alloc or
// free_completed event it replays, or of the next such event.
func opTimes(ev []int64, plan *replay.Plan) []int64 {
	if len(ev) == 0 {
		return nil
	}
	out := make([]int64, len(plan.Event))
	for i, k := range plan.Event {
		out[i] = ev[min(int(k), len(ev)-1)]
	}
	// keep it monotonic: a free_requested op takes the next event's time
	for i := 1; i < len(out); i++ {
		out[i] = max(out[i], out[i-1])
	}
	return out
}

// timeLog holds the recorded times of a device's alloc and free_completed
// events (those plan.Event counts) as a streamed read sees them, packed:
// each the zigzag varint of its difference from the last, a byte or two.
type timeLog struct {
	b        []byte
	n        int
	last     int64
	recorded bool // a time other than 0
}

func (l *timeLog) add(t int64) {
	d := t - l.last
	l.last = t
	if u := uint64(d<<1) ^ uint64(d>>63); u < 0x80 {
		l.b = append(l.b, byte(u)) // most: one byte, appended in place
	} else {
		l.b = binary.AppendUvarint(l.b, u)
	}
	l.n++
	l.recorded = l.recorded || t != 0
}

// clock reads the recorded times of the events an explorer's ops replay,
// in order: from the times of a trace read whole, or from a timeLog.
type clock struct {
	times []int64
	log   *timeLog
	pos   int   // events of log read
	off   int   // where the next one starts
	cur   int64 // the time of the last one read
}

// newClock is the clock of times or log; nil when neither recorded any.
func newClock(times []int64, log *timeLog) *clock {
	switch {
	case len(times) > 0:
		return &clock{times: times}
	case log != nil && log.recorded && log.n > 0:
		return &clock{log: log}
	}
	return nil
}

func (c *clock) rewind() { c.pos, c.off, c.cur = 0, 0, 0 }

// at is the time of event k, the last event's past the end (as opTimes).
// A log is read forward only: an event before the last one asked for
// gives that one's time.
func (c *clock) at(k int32) int64 {
	if c.times != nil {
		return c.times[max(0, min(int(k), len(c.times)-1))]
	}
	for k := min(int(k), c.log.n-1); c.pos <= k; c.pos++ {
		u := uint64(c.log.b[c.off]) // most differences take one byte
		if u < 0x80 {
			c.off++
		} else {
			var w int
			u, w = binary.Uvarint(c.log.b[c.off:])
			c.off += w
		}
		c.cur += int64(u>>1) ^ -int64(u&1)
	}
	return c.cur
}

// collector is the sink that keeps the explorer whole (Detail without a
// packer: tests, and what reads the figures rather than a page).
type collector struct {
	e     *figures.Explorer
	timed bool
}

func (c *collector) Start(s figures.ExplorerStart) { c.e, c.timed = s.Head, s.Timed }
func (c *collector) Alloc(k int32, a *figures.Lifetime) {
	c.e.Allocs = append(c.e.Allocs, *a)
}
func (c *collector) Freed(k, op int32, _ uint64) { c.e.Allocs[k].End = op }
func (c *collector) Released(k, op int32)        { c.e.Allocs[k].Released = op }
func (c *collector) Op(i int, t int64, ch figures.Change) {
	ch.Ins = slices.Clone(ch.Ins)
	c.e.Changes = append(c.e.Changes, ch)
	if c.timed {
		c.e.TimeUS = append(c.e.TimeUS, t)
	}
}
func (c *collector) First(int, []figures.BlockRec) {}
func (c *collector) Key(op int, blocks []figures.BlockRec) {
	c.e.Keys = append(c.e.Keys, figures.Keyframe{Op: op, Blocks: slices.Clone(blocks)})
}
func (c *collector) Finish() error { return nil }
