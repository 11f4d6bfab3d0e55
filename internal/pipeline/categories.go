package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/gpumem/gpumem/internal/categories"
	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/replay"
)

// errPastPeak stops a pass over a plan's operations at the peak.
var errPastPeak = errors.New("past the peak")

// sitesPerCategory is how many sites the report names per category.
const sitesPerCategory = 3

// addCategories sums cls's categories at the peak of allocated memory and
// puts them in the report. A trace records requests, not the blocks the
// allocator handed out, so the sizes come from the replay: its timeline
// names the operation after which allocated memory first peaked (a replay
// with one timeline point finds it when the report keeps none), and a
// replay stopped there lists the blocks then live. A streamed plan stays
// packed: both read it a batch at a time, and what each category held at
// each point comes from the report's replay as it ran (catRide), and so
// do the allocations live at the peak where the ride could keep them
// (peakSet), else from the replay to it (replayToPeak).
// Nothing is added when cls is nil or the replay ended in an
// out-of-memory.
func (r *Run) addCategories(cls *categories.Result) error {
	if cls == nil || r.res == nil || r.res.OOM != nil || r.plan.Len() == 0 {
		return nil
	}
	r.cls = cls
	plan := r.plan
	o := r.opts
	o.Check, o.NoDivergence = false, true
	tl := r.res.Timeline
	if tl == nil || len(tl.AllocatedOp) != len(tl.Allocated) || len(r.Report.Timeline) != len(tl.Allocated) {
		o.Points = 1
		full, err := replay.Run(plan, o)
		if err != nil || full.Timeline == nil {
			return replayErr("replaying "+r.Report.Source+" for its categories", err)
		}
		tl = full.Timeline
	}
	peak := tl.PeakOp()
	if peak < 0 {
		return nil
	}
	blocks, timeline, ok := r.rideAnswers(tl, peak)
	if !ok {
		var err error
		if blocks, timeline, err = r.peakByReplay(tl, peak); err != nil {
			return err
		}
	}
	var at [categories.NumCategories]uint64
	type key struct {
		c    categories.Category
		site string
	}
	sites := map[key]*figures.Site{}
	names := map[int32]string{}
	var total, kept uint64
	for _, b := range blocks { // in any order: the figures are sums, the sites sorted
		total += b.size
		i := -1
		switch {
		case b.event >= 0:
			i = cls.Find(b.event, 0)
		case b.event == -2:
			i = cls.Find(-1, b.address)
		}
		var blk categories.Block
		c, name := categories.Unknown, "(no stack)"
		if i >= 0 {
			blk = cls.Block(i)
			c = blk.Category
			name = r.siteOf(&blk, cls.Stack(i), names)
		}
		at[c] += b.size
		if i >= 0 && blk.KeptPastStep() {
			kept += b.size
		}
		k := key{c, name}
		if sites[k] == nil {
			sites[k] = &figures.Site{Frames: name}
		}
		sites[k].Bytes += b.size
		sites[k].Count++
	}
	fc := &figures.Categories{Op: peak, Total: total, Method: cls.Method, Steps: cls.Steps,
		Remedies: categories.Remedies(at, kept, 8), KeptPastStep: kept}
	for c := categories.Category(0); c < categories.NumCategories; c++ {
		share := figures.CategoryShare{Name: c.String(), Bytes: at[c]}
		for k, s := range sites {
			if k.c == c {
				share.Sites = append(share.Sites, *s)
			}
		}
		slices.SortFunc(share.Sites, func(x, y figures.Site) int {
			return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Frames, y.Frames))
		})
		share.Sites = share.Sites[:min(len(share.Sites), sitesPerCategory)]
		fc.Shares = append(fc.Shares, share)
	}
	fc.Timeline = timeline
	r.Report.Categories = fc
	return nil
}

// rideAnswers are addCategories' allocations live at the peak (op peak)
// and timeline of categories as the ride beside the report's replay made
// them (tl: that replay's timeline), and whether it did.
func (r *Run) rideAnswers(tl *alloc.Timeline, peak int) ([]peakBlock, [][]uint64, bool) {
	points := r.Report.Timeline
	if tl != r.res.Timeline || len(points) == 0 || len(tl.AllocatedOp) != len(points) {
		return nil, nil, false
	}
	timeline, ok := r.ride.timeline(tl.AllocatedOp)
	if !ok {
		return nil, nil, false
	}
	blocks, ok := r.ride.peakBlocks(peak, r.res.Segments)
	r.ride.peak = nil // read: a set of many ranks keeps each Run
	return blocks, timeline, ok
}

// peakByReplay is rideAnswers from a replay to the peak (replayToPeak)
// and, unless the ride made it, a pass over the ops for the timeline.
func (r *Run) peakByReplay(tl *alloc.Timeline, peak int) ([]peakBlock, [][]uint64, error) {
	o := r.opts
	o.Check, o.NoDivergence = false, true
	res, evOf, err := replayToPeak(r.plan, o, peak)
	if err != nil {
		return nil, nil, replayErr("replaying "+r.Report.Source+" to its peak", err)
	}
	var timeline [][]uint64
	points, ok := r.Report.Timeline, evOf != nil
	switch {
	case !ok:
	case len(points) == 0 || len(tl.AllocatedOp) != len(points): // no timeline of categories
	case tl == r.res.Timeline: // the report's replay handed its ops to the ride
		timeline, ok = r.ride.timeline(tl.AllocatedOp)
	default:
		ok = false
	}
	if !ok {
		// one pass over the ops gives both the allocations live at the
		// peak and what each category held at each timeline point
		evOf, timeline = opCategories(r.plan, peak, points, tl.AllocatedOp, r.cls)
	}
	var blocks []peakBlock
	for _, s := range res.Segments {
		for _, b := range s.Blocks {
			if b.State != alloc.BlockAllocated {
				continue
			}
			e := int32(-2) // no op made it: a seeded block, found by its address
			if int(b.ID) < len(evOf) {
				e = evOf[b.ID]
			}
			blocks = append(blocks, peakBlock{id: b.ID, size: b.Size, address: b.Address, event: e})
		}
	}
	return blocks, timeline, nil
}

// replayToPeak replays plan under o up to op peak, and returns the
// result and opCategories' evOf, which it takes from the ops as the
// replay passes them; nil when it could not (opCategories then makes it).
func replayToPeak(plan *replay.Plan, o replay.Options, peak int) (*replay.Result, []int32, error) {
	o.Points, o.Stop = 0, peak+1
	upto := &catPass{peak: peak, evOf: []int32{}, due: math.MaxInt}
	seen := 0
	o.Observe = func(base int, ops []alloc.Op, event []int32, _ []uint64, _ *alloc.Timeline) {
		if base != seen || event == nil && len(ops) > 0 {
			seen = -1 // not the plan's ops in order, with their events
		}
		if seen >= 0 {
			_ = upto.batch(base, ops, event, nil)
			seen += len(ops)
		}
	}
	res, err := replay.Run(plan, o)
	if err != nil || seen != peak+1 {
		return res, nil, err
	}
	return res, upto.evOf, nil
}

// opCategories passes once over plan's ops (as far as its answers need)
// for two answers. evOf maps an allocation id to the alloc event of the
// op up to peak that made it (ids are reused once freed: the last one up
// to the peak is the live one); -1 for a failed request's, -2 for an id
// no op made (a seeded block). timeline is what each category held at
// each timeline point: after the op of its stretch (up to the next
// point) where allocated memory was highest, as the point's own figures
// are (at: that op, per point, from the replay's timeline); the requests
// of the allocations then live, by the category of each (blocks live
// before the trace by their address); nil without points.
func opCategories(plan *replay.Plan, peak int, points []figures.Point, at []int, cls *categories.Result) (evOf []int32, timeline [][]uint64) {
	evOf = []int32{}
	if len(points) == 0 || len(at) != len(points) {
		points, at = nil, nil
	}
	at = slices.Clone(at)
	for j, p := range points {
		if at[j] < 0 { // a stretch no op reached
			at[j] = p.Op
		}
	}
	if points != nil {
		timeline = make([][]uint64, 0, len(points))
	}
	c := &catPass{peak: peak, at: at, timeline: timeline, evOf: evOf, byEvent: cls.InOrder()}
	c.due = c.dueAt()
	if points != nil {
		c.addSeeds(plan, cls)
	}
	c.points = points != nil
	_ = plan.Each(c.batch)
	return c.evOf, c.timeline
}

// catPass is opCategories' pass over the ops.
type catPass struct {
	peak     int
	points   bool  // the timeline is wanted
	at       []int // the op of each point
	j        int   // the next point
	due      int   // at[j], or past every op once all points are in
	timeline [][]uint64
	evOf     []int32
	byEvent  func(e int32) (categories.Category, bool)
	sums     [categories.NumCategories]int64
	byID     []catLive // allocation ids are small integers, reused once freed
}

// catLive is an allocation: its request and category; a size of 0 once
// freed (or never made), so that a free needs no test of it. event is
// the event of the op that made it, as evOf has it (-1: none classifies
// it, -2: no op made it), kept by the ride alone (for peakSet).
type catLive struct {
	size  uint64
	c     categories.Category
	event int32
}

// dueAt is the op after which the next point is taken.
func (c *catPass) dueAt() int {
	if c.j < len(c.at) {
		return c.at[c.j]
	}
	return math.MaxInt
}

// addSeeds adds the blocks plan seeds the allocator with, live before
// its first op.
func (c *catPass) addSeeds(plan *replay.Plan, cls *categories.Result) {
	for _, s := range plan.Seeds {
		for _, b := range s.Blocks {
			cat := categories.Unknown
			if blk, ok := cls.Lookup(-1, s.Address+b.Offset); ok {
				cat = blk.Category
			}
			c.add(b.ID, cat, max(b.Requested, b.Size), -2)
		}
	}
}

func (c *catPass) add(id uint32, cat categories.Category, size uint64, event int32) {
	if int(id) >= len(c.byID) {
		c.byID = slices.Grow(c.byID, int(id)+1-len(c.byID))[:int(id)+1]
	}
	c.byID[id] = catLive{size, cat, event}
	c.sums[cat] += int64(size)
}

// eventOf is the event of the op that made allocation id, as catLive
// keeps it.
func (c *catPass) eventOf(id uint32) int32 {
	if int(id) < len(c.byID) {
		return c.byID[id].event
	}
	return -2
}

// free ends allocation id, live or not (one not live takes 0 from its
// category's sum).
func (c *catPass) free(id uint32) {
	if int(id) < len(c.byID) {
		l := &c.byID[id]
		c.sums[l.c] -= int64(l.size)
		l.size = 0
	}
}

// batch passes over ops, from op index base, with their events.
func (c *catPass) batch(base int, ops []alloc.Op, event, _ []int32) error {
	for k := range ops {
		op, i := &ops[k], base+k
		if i > c.peak && c.due == math.MaxInt {
			return errPastPeak // both answers are complete
		}
		switch op.Kind {
		case alloc.OpAlloc:
			failed := op.Flags&alloc.FlagRecordedOOM != 0 // the program's failed request held nothing
			if i <= c.peak {
				for int(op.ID) >= len(c.evOf) {
					c.evOf = append(c.evOf, -2)
				}
				c.evOf[op.ID] = -1
				if !failed && event != nil {
					c.evOf[op.ID] = event[k]
				}
			}
			if c.points && !failed {
				cat := categories.Unknown
				if event != nil {
					cat, _ = c.byEvent(event[k])
				}
				c.add(op.ID, cat, op.Size, -2)
			}
		case alloc.OpFree, alloc.OpFreeRequest:
			c.free(op.ID)
		}
		if i >= c.due {
			c.takePoints(i)
		}
	}
	return nil
}

// takePoints takes the points due at op i.
func (c *catPass) takePoints(i int) {
	for ; c.j < len(c.at) && c.at[c.j] <= i; c.j++ {
		c.timeline = append(c.timeline, point(&c.sums))
	}
	c.due = c.dueAt()
}

// point is a timeline point of what each category holds, sums.
func point(sums *[categories.NumCategories]int64) []uint64 {
	p := make([]uint64, len(sums))
	for c, n := range sums {
		p[c] = uint64(max(n, 0))
	}
	return p
}

// catRide makes opCategories' timeline beside the report's replay
// (replay.Options.Observe), from the ops of each batch as the allocator
// ran them. A point's op is the timeline's AllocatedOp of its stretch,
// which the replay updates after each batch: the ride keeps what each
// category held after the stretch's op as the timeline names it so far
// (an op of this batch or of one before), and takes the point once the
// replay is past the stretch. It gives up (opCategories then makes its
// pass) when a point's op is not the one it kept, or the ops come out of
// order or without their events.
type catRide struct {
	c catPass // the live allocations, what each category holds
	// cls, when not nil, gives the category of the plan's k-th allocation
	// (the recorded out-of-memory errors' aside) as its k-th born block
	// (oneForOne), counted by next
	cls    *categories.Result
	next   int
	total  int // the plan's ops
	n      int // the ops seen
	kept   [categories.NumCategories]int64
	keptOp int   // the op after which kept was taken, -1: none
	at     []int // the op of each point taken
	last   int   // the last op of the stretch of the next point
	failed bool
	// peak, when not nil, keeps the allocations live at the highest of
	// the points kept: a plan that seeds the allocator has none (its
	// seeded blocks' sizes are the allocator's, their events none)
	peak *peakSet
}

// newCatRide is the ride of a replay of plan, whose allocations cls
// classifies.
func newCatRide(plan *replay.Plan, cls *categories.Result) *catRide {
	w := &catRide{c: catPass{points: true, byEvent: cls.InOrder()}, total: plan.Len(), keptOp: -1}
	if oneForOne(plan, cls) {
		w.cls = cls
	}
	if len(plan.Seeds) == 0 {
		w.peak = newPeakSet(plan.Len())
	}
	w.c.addSeeds(plan, cls)
	return w
}

// observe takes the ops from op index base, which the replay has just
// run, with their events; tl is the replay's timeline. The ops run in
// stretches up to the next op the ride stops at: the op whose sums it
// keeps, or the last of a point's stretch.
func (w *catRide) observe(base int, ops []alloc.Op, event []int32, sizes []uint64, tl *alloc.Timeline) {
	if w.failed || base != w.n || tl == nil || tl.Stride <= 0 || len(tl.AllocatedOp) != len(tl.Allocated) ||
		event == nil && len(ops) > 0 {
		w.failed = true
		return
	}
	if base == 0 {
		w.last = min(tl.Stride, w.total) - 1
	}
	if w.peak != nil {
		w.peak.rising = false
	}
	for k := 0; k < len(ops) && !w.failed; {
		i, keep := base+k, w.pointOp(tl)
		stop := w.last // the op to stop at, from i on
		if keep >= i && keep < stop {
			stop = keep
		}
		end := len(ops)
		if stop >= i {
			end = min(end, stop-base+1)
		}
		w.run(ops[k:end], event, sizes, k)
		if k = end; base+k-1 == keep {
			w.kept, w.keptOp = w.c.sums, keep
			if w.peak != nil {
				w.peak.point(keep, tl.Allocated[len(w.at)], sizes != nil)
			}
		}
		if base+k-1 == w.last {
			w.take(tl)
		}
	}
	w.n = base + len(ops)
}

// run applies ops, whose events are event and freed blocks' sizes sizes
// from index from on, to the live allocations and what each category
// holds, and keeps their changes for the peak while it keeps them (a
// stretch after each new highest point).
func (w *catRide) run(ops []alloc.Op, event []int32, sizes []uint64, from int) {
	if p := w.peak; p != nil && p.keep {
		if sizes == nil {
			p.lost, p.keep = true, false // until a higher point
		} else {
			p.log(ops, sizes[from:], &w.c)
		}
	}
	w.apply(ops, event, from)
}

// apply applies ops, whose events are event from index from on, to the
// live allocations and what each category holds.
func (w *catRide) apply(ops []alloc.Op, event []int32, from int) {
	c, next := &w.c, w.next
	event = event[from:][:len(ops)]
	for k := range ops {
		op := &ops[k]
		switch op.Kind {
		case alloc.OpAlloc:
			if op.Flags&alloc.FlagRecordedOOM != 0 { // the program's failed request held nothing
				c.failedAlloc(op.ID)
				continue
			}
			var cat categories.Category
			if w.cls != nil {
				cat = w.cls.BornCategory(next)
				next++
			} else {
				cat, _ = c.byEvent(event[k])
			}
			c.add(op.ID, cat, op.Size, event[k])
		case alloc.OpFree, alloc.OpFreeRequest:
			c.free(op.ID)
		}
	}
	w.next = next
}

// failedAlloc is a recorded out-of-memory's allocation id: it holds
// nothing, and a block the replay gave it has no category (event -1).
// Out of line: it is rare.
//
//go:noinline
func (c *catPass) failedAlloc(id uint32) {
	c.add(id, categories.Unknown, 0, -1)
}

// pointOp is the op of the next point as the timeline names it so far,
// -1 when there is none.
func (w *catRide) pointOp(tl *alloc.Timeline) int {
	if j := len(w.at); j < len(tl.AllocatedOp) {
		return tl.AllocatedOp[j]
	}
	return -1
}

// oneForOne: plan's allocations, the recorded out-of-memory errors'
// aside, are the alloc events of the trace cls classifies, one for one
// and in order (none was skipped as an allocation at a live address), so
// that the k-th is the k-th block born in the trace, of its event.
func oneForOne(plan *replay.Plan, cls *categories.Result) bool {
	return plan.Skipped[replay.SkipDoubleAlloc] == 0 && plan.Allocs()-plan.RecordedOOMs == cls.Born()
}

// take takes the next point, whose stretch the replay has just passed.
func (w *catRide) take(tl *alloc.Timeline) {
	j := len(w.at)
	at := w.pointOp(tl)
	if at < j*tl.Stride || at != w.keptOp {
		w.failed = true
		return
	}
	w.c.timeline = append(w.c.timeline, point(&w.kept))
	w.at = append(w.at, at)
	w.keptOp = -1
	w.last = min((j+2)*tl.Stride, w.total) - 1
}

// timeline is opCategories' timeline for points at the ops at (the
// replay's final AllocatedOp), and whether the ride made it.
func (w *catRide) timeline(at []int) ([][]uint64, bool) {
	if w == nil || w.failed || w.n != w.total || !slices.Equal(w.at, at) {
		return nil, false
	}
	return w.c.timeline, true
}

// wantSizes says whether the ride wants the next batch's freed block
// sizes (replay.Options.BlockSizes): while it keeps changes for the peak,
// or after a batch that reached a new highest point, where the next one
// may well reach another.
func (w *catRide) wantSizes() bool {
	p := w.peak
	return p != nil && !w.failed && (p.keep || p.rising)
}

// peakBlocks lists the allocations live after op peak, from the ride of
// a replay that ran to its end, and whether the ride could tell them.
func (w *catRide) peakBlocks(peak int, segs []alloc.Segment) ([]peakBlock, bool) {
	if w == nil || w.failed || w.n != w.total {
		return nil, false
	}
	return w.peak.blocks(peak, segs, w.c.eventOf)
}

// siteOf names blk's allocation site: the top user frames of its stack or,
// when it has none, its category and the phase it was born in.
func (r *Run) siteOf(blk *categories.Block, stack int32, names map[int32]string) string {
	if stack >= 0 && r.snap != nil {
		name, ok := names[stack]
		if !ok {
			name = siteName(r.snap, stack, DefaultSiteDepth)
			names[stack] = name
		}
		if name != "(no stack)" {
			return name
		}
	}
	return noStackName(r.cls, blk)
}

// noStackName names an allocation with no Python frame by its phase and
// category, such as "(no stack) backward, no Python frame (autograd
// engine): activation".
func noStackName(cls *categories.Result, blk *categories.Block) string {
	phase := blk.Phase.String()
	if blk.Phase == categories.Backward && cls != nil && cls.Stacks {
		phase = "backward, no Python frame (autograd engine)"
	}
	return fmt.Sprintf("(no stack) %s: %s", phase, blk.Category)
}

// seriesPoints is the most points of the explorer's category series.
const seriesPoints = 2000

// explorerCategories gives each allocation of ex its category and samples
// what each category held over the ops.
func (r *Run) explorerCategories(ex *figures.Explorer, plan *replay.Plan) {
	if r.cls == nil || ex == nil {
		return
	}
	seeded := 0
	for _, s := range plan.Seeds {
		seeded += len(s.Blocks)
	}
	for c := categories.Category(0); c < categories.NumCategories; c++ {
		ex.Categories = append(ex.Categories, c.String())
	}
	type change struct {
		op    int32
		cat   uint8
		delta int64
	}
	changes := make([]change, 0, 2*len(ex.Allocs))
	for k := range ex.Allocs {
		a := &ex.Allocs[k]
		var blk categories.Block
		var ok bool
		switch {
		case k < seeded:
			blk, ok = r.cls.Lookup(-1, a.Address)
		default:
			blk, ok = opBlock(plan, r.cls, int(a.Start))
		}
		c := categories.Unknown
		if ok {
			c = blk.Category
		}
		a.Category = uint8(c) + 1
		changes = append(changes, change{a.Start, uint8(c), int64(a.Size)}, change{a.End, uint8(c), -int64(a.Size)})
	}
	slices.SortStableFunc(changes, func(x, y change) int { return cmp.Compare(x.op, y.op) })
	stride := max(1, (ex.Ops+seriesPoints-1)/seriesPoints)
	var cur [categories.NumCategories]int64
	var total int64
	best, bestOp, bestTotal := cur, -1, int64(-1)
	j := 0
	for op := 0; op < ex.Ops; op++ {
		for ; j < len(changes) && int(changes[j].op) <= op; j++ {
			cur[changes[j].cat] += changes[j].delta
			total += changes[j].delta
		}
		if total > bestTotal {
			best, bestOp, bestTotal = cur, op, total
		}
		if (op+1)%stride == 0 || op == ex.Ops-1 {
			p := figures.CategoryPoint{Op: bestOp, Bytes: make([]uint64, len(best))}
			for c, n := range best {
				p.Bytes[c] = uint64(max(n, 0))
			}
			ex.CategorySeries = append(ex.CategorySeries, p)
			bestTotal = -1
		}
	}
}

// opBlock is the classified block that alloc op i of plan made, and
// whether there is one: none for an op of no alloc event (the request a
// recorded out-of-memory failed).
func opBlock(plan *replay.Plan, cls *categories.Result, i int) (categories.Block, bool) {
	if i < 0 || i >= len(plan.Ops) || i >= len(plan.Event) || plan.Ops[i].Kind != alloc.OpAlloc ||
		plan.Ops[i].Flags&alloc.FlagRecordedOOM != 0 {
		return categories.Block{}, false
	}
	return cls.ByEvent(plan.Event[i])
}
