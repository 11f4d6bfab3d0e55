package replay

import (
	"cmp"
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
	released := make([]bool, len(pools))
	for r := range f.runAt {
		run := f.run(r)
		var ri runInfo
		onlyPrivate := len(run) > 0
		for _, si := range run {
			l := int(f.segs[si].label)
			if l <= 0 {
				onlyPrivate = false
				continue
			}
			if !released[l] && last[l] < f.runAt[r] {
				released[l] = true
				ri.release = append(ri.release, uint32(l))
			}
		}
		if onlyPrivate {
			ri.poolOnly = f.survDef[r] || slices.ContainsFunc(f.surv(r), func(si int32) bool { return f.segs[si].label == labelDefault })
		}
		ri.enters = f.entersPool(r)
		if len(ri.release) > 0 || ri.poolOnly || ri.enters {
			pp.runs = append(pp.runs, poolRun{int(f.runAt[r]), ri}) // f.runAt ascends
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
	f.passedClaims()
	return pp
}

// runAt is the runInfo of the release run whose first event is at (zero
// when it needs none). The builder asks of each run in trace order: a
// cursor steps through the runs, as a map's look-up per run would cost
// more (a trace may have a run every few events).
func (pp *poolPlan) runAt(at int) runInfo {
	rs, k := pp.runs, pp.next
	if k > 0 && rs[k-1].at >= at { // asked out of order: searched from the start
		k, _ = slices.BinarySearchFunc(rs, at, func(r poolRun, at int) int { return cmp.Compare(r.at, at) })
	}
	for k < len(rs) && rs[k].at < at {
		k++
	}
	pp.next = k
	if k < len(rs) && rs[k].at == at {
		return rs[k].runInfo
	}
	return runInfo{}
}

// passedClaims marks as claims the allocations that passed over a block
// of their own private pool: best fit within the pool would have taken
// it, so the allocation took its block by address — a CUDA graph tree's
// checkpoint restore (setCheckpointPoolState's alloc_found_block), whose
// blocks go back where the checkpoint had them. Read as exclusions while
// walking, they are contradicted by the labels (the snapshot's pool ids
// say both segments are one pool's). Such an allocation is one of a pair
// of segments apart that ended in one pool: where there is none, nothing
// is marked; else the trace is walked once more, each segment's blocks
// classed by its pool, and each allocation asks whether the blocks it
// passed over hold one of its own pool's.
//
// The walk again reuses f's segment records, the largest of its tables
// (a trace walks the same segments each time): f is done with them.
func (f *inferer) passedClaims() {
	if f.claim == nil || f.again == nil || !f.samePoolApart() {
		return
	}
	g := newInferer(f.cfg)
	g.mode, g.claim = walkClaims, f.claim
	g.segClass, g.skipOpen = make([]int32, len(f.segs)), !f.sharedBase
	g.ownFree = g.skipOpen && !f.overlap
	for si := range f.segs {
		s := &f.segs[si]
		g.segClass[si] = -1
		if s.label > 0 {
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

// samePoolApart says whether two segments of one private pool may have
// been found apart: a pair of open segments, an open segment apart from
// a classed one of its pool's label, a classed one that passed over a
// block of its own class.
func (f *inferer) samePoolApart() bool {
	// (f.apart holds the pairs of an open segment and the lowest classed
	// one it is apart from too: the loop below finds those of one pool;
	// it reads the partners of the segments of a private pool alone)
	same := false
	for x := range f.apart.rows {
		if l := f.segs[x].label; l > 0 {
			f.apart.each(x, x, func(y int) { same = same || f.segs[y].label == l })
			if same {
				return true
			}
		}
	}
	for si := range f.segs {
		s := &f.segs[si]
		if s.label > 0 && (s.samePass || slices.ContainsFunc(f.closedIDs(si), func(w uint64) bool { return w != 0 })) {
			return true
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
