package replay

import (
	"slices"

	"github.com/gpumem/gpumem/pkg/trace"
)

// This file holds the labelling rules of pool inference
// (docs/pytorch-allocator.md §19.4): the evidence (the snapshot's pool ids,
// release order), then propagation (order within runs, exclusions,
// survivors of a global release, continuity), and the CUDA generator's
// seed and offset, which stay in the default pool.

// set labels segment si l, unless it has a label that says more.
func (f *inferer) set(si, l int, how string) bool {
	s := &f.segs[si]
	if int(s.label) == l || (l == labelPrivate && s.label > 0) {
		return false
	}
	if s.label == labelUnknown || (s.label == labelPrivate && l > 0) {
		s.label, s.how = int32(l), howIndex(how)
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
		si, ok := f.liveAt(fs.Address)
		if !ok {
			continue
		}
		l, ok := idOf[fs.PoolID]
		if !ok {
			l = len(ids)
			ids = append(ids, fs.PoolID)
			idOf[fs.PoolID] = l
		}
		f.segs[si].label, f.segs[si].how = int32(l), howIndex(howSnapshot)
	}
	// E4: a global release frees default large, default small, then the
	// released pools' small and large segments; where that order breaks,
	// private segments begin
	f.runStart = make([]int, len(f.runAt))
	f.groupOf = map[int]int{}
	if f.orderOK {
		for r := range f.runAt {
			run := f.run(r)
			k := orderBreak(f, run)
			if k < 0 {
				continue
			}
			if f.poolThenGlobal(run, k) {
				// one pool's own release, then empty_cache()'s
				f.runStart[r] = k
				for _, si := range run[:k] {
					f.set(int(si), labelPrivate, howOrder)
					f.groupOf[int(si)] = len(f.groups)
				}
				f.groups = append(f.groups, run[:k])
				// the global part in order is the default pools' (a
				// freeable pool's segments follow where the order breaks)
				end := len(run)
				if k2 := orderBreak(f, run[k:]); k2 >= 0 {
					end = k + k2
				}
				for _, si := range run[k:end] {
					f.set(int(si), labelDefault, howOrder)
				}
				if k = end; k == len(run) {
					continue
				}
			}
			for _, si := range run[k:] {
				f.set(int(si), labelPrivate, howOrder)
			}
		}
	}
	// any private label or exclusion: a trace of the default pool alone
	// shows none
	evidence := len(ids) > 1 || f.anyApart
	for si := range f.segs {
		s := &f.segs[si]
		evidence = evidence || s.label == labelPrivate
	}
	if !evidence {
		return nil
	}
	return ids
}

// orderBreak is the first index of run whose segment sorts before the one
// before it (classKey), -1 when the run is in order.
func orderBreak(f *inferer, run []int32) int {
	for k := 1; k < len(run); k++ {
		if lessKey(f.classKey(int(run[k])), f.classKey(int(run[k-1]))) {
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
func (f *inferer) poolThenGlobal(run []int32, k int) bool {
	small := func(si int32) bool { return f.segs[si].small }
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
	f.exclusions()
	f.propagate()
	// the label of each class: the snapshot's, fixed
	idOf := map[[2]int64]int{}
	for l, id := range ids {
		idOf[id] = l
	}
	classLabel := make([]int, len(f.classIDs))
	for c, id := range f.classIDs {
		classLabel[c] = idOf[id]
	}
	// private segments of unknown pool, in the order they were made: the
	// pool of the nearest private allocation on the stream, else the pool
	// inferred last; a pool an exclusion rules out (a request passed
	// over a free block of it) is skipped for the next choice, and a new
	// pool inferred when none is left. A pool-only release's segments
	// share their pool.
	inferred := 0 // the last inferred pool's label
	for si := range f.segs {
		s := &f.segs[si]
		if s.label != labelPrivate {
			continue
		}
		members := []int{si}
		if g, ok := f.groupOf[si]; ok {
			members = members[:0]
			for _, m := range f.groups[g] {
				if f.segs[m].label == labelPrivate {
					members = append(members, int(m))
				}
			}
		}
		// of the pools an exclusion rules out, only the two choices
		// matter: whether each is among them
		near := f.nearestPool(si)
		exNear, exInferred := false, false
		rule := func(l int) {
			exNear = exNear || l == near
			exInferred = exInferred || l == inferred
		}
		for _, m := range members {
			f.apart.each(m, -1, func(o int) {
				if l := f.segs[o].label; l > 0 {
					rule(int(l))
				}
			})
			if ids := f.closedIDs(m); ids != nil {
				for c, l := range classLabel {
					if ids[c/64]&(1<<(c%64)) != 0 && l > 0 {
						rule(l)
					}
				}
			}
		}
		l, ex := near, exNear
		if l <= 0 || ex {
			l, ex = inferred, exInferred
		}
		if l <= 0 || ex {
			ids = append(ids, [2]int64{})
			l, inferred = len(ids)-1, len(ids)-1
		}
		for _, m := range members {
			f.segs[m].label = int32(l)
		}
	}
	return f.lifetimes(ids)
}

// lifetimes splits a pool where it was released and a later segment took
// its label: a release run gives back only a freeable pool's segments
// (§19.3), and a released pool takes no new allocations, so a private
// segment born after a run that freed one of the pool's segments is in
// another pool — a program that makes a new MemPool (or graph) again and
// again gets its segments at the old one's addresses, which continuity
// alone reads as one pool. The pool's snapshot id, if any, goes with its
// last lifetime, whose segments are the ones alive at the end.
func (f *inferer) lifetimes(ids [][2]int64) [][2]int64 {
	cur := make([]int, len(ids)) // a pool's label → its present lifetime's
	for l := range cur {
		cur[l] = l
	}
	released := make([]bool, len(ids)) // per lifetime: a run has freed segments of it
	r := 0
	for si := range f.segs {
		s := &f.segs[si]
		for r < len(f.runAt) && f.runAt[r] < s.born {
			for _, x := range f.run(r) {
				if l := f.segs[x].label; l > 0 && int(l) < len(released) {
					released[l] = true
				}
			}
			r++
		}
		l := int(s.label)
		if l <= 0 || l >= len(cur) {
			continue
		}
		if released[cur[l]] {
			ids = append(ids, [2]int64{})
			released = append(released, false)
			cur[l] = len(ids) - 1
		}
		s.label = int32(cur[l])
	}
	for l, c := range cur {
		if c != l && ids[l] != ([2]int64{}) {
			ids[c], ids[l] = ids[l], [2]int64{}
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
func (f *inferer) propagate() {
	// the run that freed each segment, -1: none (a run frees a live
	// segment, which leaves the live ones as it does: one run at most)
	runOf := make([]int32, len(f.segs))
	for si := range runOf {
		runOf[si] = -1
	}
	for r := range f.runAt {
		for _, si := range f.run(r) {
			runOf[si] = int32(r)
		}
	}
	var queue []int
	set := func(si, l int, how string) {
		if f.set(si, l, how) {
			queue = append(queue, si)
		}
	}
	order := func(r int) {
		run := f.run(r)[f.runStart[r]:]
		lastD, firstP := -1, len(run)
		for k, si := range run {
			if f.segs[si].label == labelDefault {
				lastD = k
			}
			if l := f.segs[si].label; (l == labelPrivate || l > 0) && k < firstP {
				firstP = k
			}
		}
		for k := 0; k < lastD; k++ {
			set(int(run[k]), labelDefault, howOrder)
		}
		for k := firstP + 1; k < len(run); k++ {
			set(int(run[k]), labelPrivate, howOrder)
		}
		if f.orderOK && (lastD >= 0 || f.runStart[r] > 0) { // a global release
			for _, si := range f.surv(r) {
				set(int(si), labelPrivate, howOrder)
			}
		}
	}
	exclude := func(x, y int) { // y's label from x's
		switch l := f.segs[x].label; {
		case l == labelDefault:
			set(y, labelPrivate, howExclusion)
		case l == labelPrivate || l > 0:
			set(y, labelDefault, howExclusion)
		}
	}
	for r := range f.runAt {
		order(r)
	}
	f.apart.eachPair(func(x, y int) {
		exclude(x, y)
		exclude(y, x)
	})
	next := 0 // segments before it are labeled: labels are never unset
	for {
		for len(queue) > 0 {
			si := queue[0]
			queue = queue[1:]
			if r := runOf[si]; r >= 0 {
				order(int(r))
			}
			// si is labeled (a label set is never unknown), and the rules
			// set unknown labels only: its partners' labels say nothing
			// more of it
			f.apart.each(si, -1, func(o int) {
				if f.segs[o].label == labelUnknown {
					exclude(si, o)
				}
			})
		}
		for next < len(f.segs) && f.segs[next].label != labelUnknown {
			next++
		}
		if next == len(f.segs) {
			return
		}
		l := f.nearest(next)
		if f.generatorSegment(next) {
			l = labelDefault
		}
		set(next, l, howContinuity)
	}
}

// exclusions completes f.apart, the pairs of segments known to be in
// different pools, which the rules read in one order (a map's would
// differ from run to run): by the lower segment, then the higher. Of the
// pairs of an open segment and a classed one (whose label the snapshot
// fixed), only the one with the lowest classed segment can label the
// open one (rules set unknown labels only, and it comes first in that
// order); a pair of two classed ones labels none.
func (f *inferer) exclusions() {
	for si, s := range f.classes {
		if s.min >= 0 {
			f.apart.add(si, int(s.min))
		}
	}
}

// byDistance walks the alloc events (their indexes in the records) in
// order of their distance in the trace from an event, that event itself
// left out, the earlier first at equal distances. It is a loop of its
// own in each of its uses, not a callback: labelling walks it for each
// private segment.
type byDistance struct {
	a          []int32 // f.allocAt
	at, lo, hi int     // the event; the next records below and above it
}

// fromSegment walks from segment si's first allocation, or from its
// birth when it has none (then found by halving: a segment_alloc is not
// in the records).
func (f *inferer) fromSegment(si int) byDistance {
	s := &f.segs[si]
	d := byDistance{a: f.allocAt}
	if k := int(s.firstAlloc); k >= 0 {
		d.at, d.lo, d.hi = int(d.a[k]), k-1, k+1
		return d
	}
	d.at = int(s.born)
	hi, found := slices.BinarySearch(d.a, int32(d.at))
	d.lo, d.hi = hi-1, hi
	if found {
		d.hi++
	}
	return d
}

// next is the next alloc's index in the records, -1 when none is left.
func (d *byDistance) next() int {
	lo, hi := d.lo, d.hi
	if hi >= len(d.a) {
		d.lo--
		return lo // -1 when none is left
	}
	if lo >= 0 && d.at-int(d.a[lo]) <= int(d.a[hi])-d.at {
		d.lo--
		return lo
	}
	d.hi++
	return hi
}

// nearest is the label of the labeled allocation closest in event order to
// segment si's first allocation on its stream; default when there is none.
func (f *inferer) nearest(si int) int {
	stream := f.segs[si].stream
	for d := f.fromSegment(si); ; {
		k := d.next()
		if k < 0 {
			return labelDefault
		}
		if f.rec[k].stream() != stream || f.generatorAlloc(k) {
			continue
		}
		if o := f.segOfAlloc[k]; o >= 0 && int(o) != si {
			if ol := int(f.segs[o].label); ol != labelUnknown {
				if ol > 0 {
					return labelPrivate
				}
				return ol
			}
		}
	}
}

// generatorSegment: segment si was made for the CUDA generator's seed and offset
// (two 8-byte tensors allocated back to back on the capture stream before
// capture_begin): default pool, although private allocations follow it.
func (f *inferer) generatorSegment(si int) bool {
	k := int(f.segs[si].firstAlloc)
	if k < 0 {
		return false
	}
	return k+1 < len(f.allocAt) && f.allocAt[k+1] == f.allocAt[k]+1 && f.generatorAlloc(k) && int(f.segOfAlloc[k+1]) == si
}

// generatorAlloc: alloc k (its index in the records) is one of such a
// pair. It says nothing of the pool the allocations around it were
// routed to.
func (f *inferer) generatorAlloc(k int) bool {
	rec, at := f.rec, f.allocAt
	pair := func(a, b int) bool { // allocs a and b, one event after the other
		return a >= 0 && b < len(rec) && at[b] == at[a]+1 && rec[a]&recSize8 != 0 && rec[b]&recSize8 != 0 &&
			rec[a].stream() == rec[b].stream()
	}
	return pair(k, k+1) || pair(k-1, k)
}

// nearestPool is the pool of the nearest allocation on si's stream that
// landed in a segment of a known private pool, 0 when none.
func (f *inferer) nearestPool(si int) int {
	stream := f.segs[si].stream
	// the segment each side found last, known not to be one: neighbouring
	// allocations land in one segment mostly, and its record (a cache miss
	// on a trace of many segments) is read once
	below, above := int32(-1), int32(-1)
	d := f.fromSegment(si)
	for {
		lo := d.lo
		k := d.next()
		if k < 0 {
			return 0
		}
		last := &above
		if k == lo {
			last = &below
		}
		o := f.segOfAlloc[k]
		if o < 0 || o == *last {
			continue
		}
		if s := &f.segs[o]; s.label > 0 && s.stream == stream {
			return int(s.label)
		}
		*last = o
	}
}
