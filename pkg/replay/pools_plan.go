package replay

import (
	"cmp"
	"math/bits"
	"slices"
	"sort"
	"strconv"
)

// This file turns the labels into what the plan builder reads: each
// allocation's pool, the pools released before each release run, and the
// runs that begin a capture or MemPool window.

// plan turns the labels into what the plan builder needs. It is the
// inferer's last use: the walk for claims at its end takes over the
// segment records.
func (f *inferer) plan(ids [][2]int64) *poolPlan {
	pp := &poolPlan{claim: f.claim}
	pools := make([]Pool, len(ids))
	hows := make([]uint8, len(ids)) // per pool, the evidence seen (bits by index in howNames)
	for l := range pools {
		pools[l] = Pool{Pool: uint32(l), ID: ids[l], Released: -1}
	}
	for si := range f.segs {
		s := &f.segs[si]
		if s.label > 0 {
			pools[s.label].Segments++
			hows[s.label] |= 1 << s.how
		}
	}
	// each alloc's pool (0: the default), in place of its segment: the
	// records are done with it (entersPool reads the pools)
	last := make([]int32, len(pools)) // per label, its last allocation's event
	for k, o := range f.segOfAlloc {
		l := int32(0)
		if o >= 0 && f.segs[o].label > 0 {
			l = f.segs[o].label
			pools[l].Allocs++
			last[l] = f.allocAt[k]
		}
		f.segOfAlloc[k] = l
	}
	// a pool is released before the first run that frees one of its
	// segments (and after its last allocation: labels that say otherwise
	// are wrong somewhere, and the pool is released at a later run); a run
	// that frees only private segments while a default whole-free segment
	// survives is ~MemPool's own emptyCache
	gone := make([]bool, len(pools)) // per pool: a run releases it
	for r := range f.runAt {
		run := f.run(r)
		ri := poolRun{at: f.runAt[r], off: int32(len(pp.released))} // f.runAt ascends
		onlyPrivate := len(run) > 0
		for _, si := range run {
			l := int(f.segs[si].label)
			if l <= 0 {
				onlyPrivate = false
				continue
			}
			if !gone[l] && last[l] < f.runAt[r] {
				gone[l] = true
				pp.released = append(pp.released, uint32(l))
			}
		}
		if onlyPrivate {
			ri.poolOnly = f.survDef[r] || slices.ContainsFunc(f.surv(r), func(si int32) bool { return f.segs[si].label == labelDefault })
		}
		ri.enters = f.entersPool(r)
		if int(ri.off) < len(pp.released) || ri.poolOnly || ri.enters {
			pp.runs = append(pp.runs, ri)
		}
	}
	// pools of the same evidence share its list of names (a trace may
	// have many pools)
	names := map[uint8][]string{}
	for l := 1; l < len(pools); l++ {
		how, ok := names[hows[l]]
		if !ok {
			for h, name := range howNames {
				if hows[l]&(1<<h) != 0 {
					how = append(how, name)
				}
			}
			sort.Strings(how)
			how = slices.Clip(how)
			names[hows[l]] = how
		}
		pools[l].How = how
	}
	// the pools that made a segment, in place
	pp.pools = slices.DeleteFunc(pools[1:], func(p Pool) bool { return p.Segments == 0 })
	if len(pp.pools) == 0 {
		pp.pools = nil
	}
	pp.allocPool, f.segOfAlloc = f.segOfAlloc, nil
	f.passedClaims(len(ids))
	return pp
}

// runAt is the runInfo of the release run whose first event is at (zero
// when it needs none). The builder asks of each run in trace order: a
// cursor steps through the runs, as a map's look-up per run would cost
// more (a trace may have a run every few events).
func (pp *poolPlan) runAt(at int) runInfo {
	rs, k := pp.runs, pp.next
	if k > 0 && int(rs[k-1].at) >= at { // asked out of order: searched from the start
		k, _ = slices.BinarySearchFunc(rs, at, func(r poolRun, at int) int { return cmp.Compare(int(r.at), at) })
	}
	for k < len(rs) && int(rs[k].at) < at {
		k++
	}
	pp.next = k
	if k == len(rs) || int(rs[k].at) != at {
		return runInfo{}
	}
	end := len(pp.released)
	if k+1 < len(rs) {
		end = int(rs[k+1].off)
	}
	return runInfo{release: pp.released[rs[k].off:end:end], poolOnly: rs[k].poolOnly, enters: rs[k].enters}
}

// passedClaims marks as claims the allocations that passed over a block
// of their own private pool: best fit within the pool would have taken
// it, so the allocation took its block by address — a CUDA graph tree's
// checkpoint restore (setCheckpointPoolState's alloc_found_block), whose
// blocks go back where the checkpoint had them. Read as exclusions while
// walking, they are contradicted by the labels (the snapshot's pool ids
// say both segments are one pool's). Such an allocation is one of a pair
// of segments apart that ended in one pool: where there is none, nothing
// is marked; else the trace is walked once more, the blocks of the
// segments of those pools (claimLabels) classed by their pool, and each
// allocation in one asks whether the blocks it passed over hold one of
// its own pool's.
//
// The walk again reuses f's segment records, the largest of its tables
// (a trace walks the same segments each time): f is done with them.
func (f *inferer) passedClaims(labels int) {
	if f.claim == nil || f.again == nil {
		return
	}
	walked := f.claimLabels(labels)
	if walked == nil {
		return
	}
	g := newInferer(f.cfg)
	g.mode, g.claim = walkClaims, f.claim
	g.segClass, g.skipOpen = make([]int32, len(f.segs)), !f.sharedBase
	g.ownFree = g.skipOpen && !f.overlap
	for si := range f.segs {
		s := &f.segs[si]
		g.segClass[si] = -1
		if s.label > 0 && walked[s.label] {
			g.segClass[si] = int32(s.label)
		}
	}
	g.segs, f.segs = f.segs[:0], nil
	// g's walk makes block models and free-set nodes as f's did: it
	// reuses their arrays rather than growing new ones beside them
	// (newLive and addKey take a model's or a list's arrays past the
	// slice's length, newNode appends zeroed nodes)
	g.live, f.live = f.live[:0], nil
	g.tree.nodes, f.tree.nodes = append(f.tree.nodes[:0], freeNode{}), nil
	g.tree.lists, f.tree.lists = f.tree.lists[:0], nil
	again := f.again
	*f = inferer{} // what the walk of f left is garbage now
	again(g)
}

// claimLabels is the private labels (of n) whose segments the walk for
// claims models, true each, nil for none: the labels of two segments of
// one pool that may have been found apart. A claim is a request that
// passed over a block of its own pool's, which the walk found apart
// when labels were unknown: a pair of open segments (f.apart), an open
// segment apart from a class one of whose segments has its label, a
// classed one that passed over a block of its own class. (Its own
// segment's blocks do not count: a request that passed over one of those
// was a claim at once.) A segment of another label makes no claim, and
// only its own events change its blocks: the walk leaves it out.
//
// Where two live segments overlapped or shared a base, a block at an
// address two segments had may be another segment's node in one walk
// than in the other (TestClaimsWalkOverlap): every private label is
// walked where any is.
func (f *inferer) claimLabels(n int) []bool {
	var labels []bool
	mark := func(l int32) {
		if labels == nil {
			labels = make([]bool, n)
		}
		labels[l] = true
	}
	marked := func(l int32) bool { return labels != nil && labels[l] }
	// (f.apart holds the pairs of an open segment and the lowest classed
	// one it is apart from too: the loop below finds those of one pool;
	// it reads the partners of the segments of a private pool alone)
	for x := range f.apart.rows {
		if l := f.segs[x].label; l > 0 && !marked(l) {
			same := false
			f.apart.each(x, x, func(y int) { same = same || f.segs[y].label == l })
			if same {
				mark(l)
			}
		}
	}
	// a classed segment's requests that passed over another class's
	// blocks left no record: where two classes share a label, every
	// label is walked
	cl := f.labelsOfClasses(n)
	for si := range f.segs {
		s := &f.segs[si]
		if s.label > 0 && (cl.shared || !marked(s.label) && (s.samePass || f.apartFromOwn(si, cl))) {
			mark(s.label)
		}
	}
	if labels != nil && (f.overlap || f.sharedBase) {
		for l := range labels {
			labels[l] = true
		}
	}
	return labels
}

// classLabels are the labels of the segments of each class (classOf),
// for apartFromOwn: one a class (the snapshot gives its segments one pool
// id, and so one label) unless a release split that pool's lifetimes.
type classLabels struct {
	one   []int32           // per class: its segments' label, classNone or classMixed
	mixed map[[2]int32]bool // of a class of classMixed: (class, label) of each of its segments
	// shared: segments of two classes have one private label (their pool
	// ids differ, which labelling keeps apart, but for a classed segment
	// the snapshot did not label)
	shared bool
}

// Class labels (classLabels.one) that are not a label.
const (
	classNone  = -4 // no segment of the class
	classMixed = -3 // its segments have different labels (see mixed)
)

// labelsOfClasses is the labels (of n) of each class's segments.
func (f *inferer) labelsOfClasses(n int) *classLabels {
	cl := &classLabels{one: make([]int32, len(f.classIDs))}
	for c := range cl.one {
		cl.one[c] = classNone
	}
	classOf := make([]int32, n) // per private label: the class of a segment of it, or -1
	for l := range classOf {
		classOf[l] = -1
	}
	for si := range f.classes {
		c := f.classes[si].class
		l := f.segs[si].label
		if c >= 0 && l > 0 {
			if o := classOf[l]; o < 0 {
				classOf[l] = c
			} else if o != c {
				cl.shared = true
			}
		}
		switch {
		case c < 0 || cl.one[c] == l:
		case cl.one[c] == classNone:
			cl.one[c] = l
		default:
			cl.one[c] = classMixed
		}
	}
	for si := range f.classes {
		if c := f.classes[si].class; c >= 0 && cl.one[c] == classMixed {
			if cl.mixed == nil {
				cl.mixed = map[[2]int32]bool{}
			}
			cl.mixed[[2]int32{c, f.segs[si].label}] = true
		}
	}
	return cl
}

// has says whether a segment of class c has label l.
func (cl *classLabels) has(c, l int32) bool {
	if one := cl.one[c]; one != classMixed {
		return one == l
	}
	return cl.mixed[[2]int32{c, l}]
}

// apartFromOwn says whether open segment si was found apart from a
// classed segment of its own pool. An open segment's closed set holds the
// classes of the classed blocks its requests passed over and of the
// classed requests that passed over its blocks: only where a segment of
// one of those classes has si's label can the walk for claims find a
// claim between them.
func (f *inferer) apartFromOwn(si int, cl *classLabels) bool {
	l := f.segs[si].label
	for w, word := range f.closedIDs(si) {
		for ; word != 0; word &= word - 1 {
			if cl.has(int32(w*64+bits.TrailingZeros64(word)), l) {
				return true
			}
		}
	}
	return false
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
	if f.cfg.MaxSplitSize > 0 && !slices.ContainsFunc(f.run(r), func(si int32) bool { return f.segs[si].label == labelDefault }) {
		return false
	}
	// the segment the next request made and the generator's pair come
	// between; anything else ends the look
	const within = 6
	end := int(f.runEnd[r])
	k, _ := slices.BinarySearch(f.allocAt, int32(end+1))
	for ; k < len(f.allocAt) && int(f.allocAt[k]) <= end+within; k++ {
		if f.generatorAlloc(k) {
			continue
		}
		return f.segOfAlloc[k] > 0 // its pool (plan wrote them in)
	}
	return false
}

// String describes a pool in one line, for reports. Appended piece by
// piece, not through fmt: a report lists every pool, and a trace may have
// tens of thousands.
func (p Pool) String() string {
	var buf [160]byte // on the stack: the string alone is allocated
	b := buf[:0]
	b = append(b, "private pool "...)
	b = strconv.AppendUint(b, uint64(p.Pool), 10)
	if p.ID != [2]int64{} {
		b = append(b, " (id ("...)
		b = strconv.AppendInt(b, p.ID[0], 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, p.ID[1], 10)
		b = append(b, ")): "...)
	} else {
		b = append(b, " (id unknown): "...)
	}
	b = strconv.AppendInt(b, int64(p.Segments), 10)
	b = append(b, " segments, "...)
	b = strconv.AppendInt(b, int64(p.Allocs), 10)
	b = append(b, " allocations, "...)
	if p.Released >= 0 {
		b = append(b, "released before event "...)
		b = strconv.AppendInt(b, int64(p.Released), 10)
	} else {
		b = append(b, "alive at the end"...)
	}
	b = append(b, "; inferred from "...)
	for i, h := range p.How {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, h...)
	}
	return string(b)
}
