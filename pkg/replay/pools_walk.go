package replay

import (
	"math"
	"slices"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// This file is the block model pool inference walks (docs/pytorch-allocator.md
// §19.4): each segment's blocks split and merged as PyTorch does, best fit
// within a stream and size class, and the evidence the walk collects on the
// way: exclusions, release runs with their survivors, and checkpoint
// restores.

// at is the live segment holding addr, -1 when none.
func (f *inferer) at(addr uint64) int {
	// the segment found last at an address of this MiB (256 places, the
	// MiB hashed: copies of a program's pools may lie GiBs apart), while
	// it is live and no live segment overlaps another or shares its base
	// (it is then the one live segment holding addr): a program
	// allocates in many segments in turn
	slot := &f.atCache[(addr>>20)*0x9e3779b97f4a7c15>>56]
	if h := int(*slot) - 1; h >= 0 && !f.overlap && !f.sharedBase {
		if s := &f.segs[h]; s.live >= 0 && addr >= s.addr && addr < s.addr+s.size {
			return h
		}
	}
	// the last base at or below addr, searched here (a call to
	// slices.BinarySearch costs as much as its few steps)
	bases := f.bases
	lo, hi := 0, len(bases)
	for lo < hi {
		if m := int(uint(lo+hi) >> 1); bases[m] <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return -1
	}
	si := int(f.baseSeg[lo-1])
	if s := &f.segs[si]; addr >= s.addr+s.size {
		return -1
	}
	*slot = int32(si) + 1
	return si
}

// liveAt is the live segment based at addr.
func (f *inferer) liveAt(addr uint64) (int, bool) {
	if k, ok := slices.BinarySearch(f.bases, addr); ok {
		return int(f.baseSeg[k]), true
	}
	return 0, false
}

// model is live segment si's block model.
func (f *inferer) model(si int) *segLive { return &f.live[f.segs[si].live] }

// newLive is the index in f.live of a block model of a new segment,
// one free block at addr of size, a spare one's where there is one.
func (f *inferer) newLive(addr, size uint64) int32 {
	var li int32
	if n := len(f.spare); n > 0 {
		li, f.spare = f.spare[n-1], f.spare[:n-1]
	} else {
		li = int32(len(f.live))
		if len(f.live) < cap(f.live) {
			f.live = f.live[:li+1] // an earlier walk's model (passedClaims): its arrays are reused below
		} else {
			f.live = append(f.live, segLive{})
		}
	}
	m := &f.live[li]
	*m = segLive{blocks: append(m.blocks[:0], modelBlock{addr, size, true}), free: m.free[:0], lastAlloc: -1, whole: -1}
	return li
}

// round is round_size; without roundup_power2_divisions it is 512-byte
// rounding, done here rather than through cgo for every event.
func (f *inferer) round(size uint64) uint64 {
	if f.divisions {
		return alloc.RoundSize(f.cfg, size)
	}
	return max((size+511)/512*512, 512)
}

// keyOf is the index of the free set of segments of the stream of index
// stream (streamIndex) and size class small.
func (f *inferer) keyOf(stream uint32, small bool) int32 {
	for int(stream) >= len(f.keys) {
		f.keys = append(f.keys, [2]int32{-1, -1})
	}
	c := 0
	if small {
		c = 1
	}
	k := &f.keys[stream][c]
	if *k < 0 {
		*k = int32(len(f.roots))
		f.roots = append(f.roots, 0)
	}
	return *k
}

// blockClass is the class of segment si's blocks in the free sets.
func (f *inferer) blockClass(si int) int32 {
	switch f.mode {
	case walkFull:
		return f.classOf(si)
	case walkClaims:
		return f.segClass[si]
	}
	return -1
}

// addFree adds free block b to segment si, whose block model is m.
func (f *inferer) addFree(si int, m *segLive, b modelBlock) {
	c := f.blockClass(si)
	tc := c
	if f.mode == walkClaims {
		tc = -1 // the sets of each class hold the classes
	}
	var x int32
	if f.ownFree {
		f.tree.seq++
		x = f.tree.newNode(b.size, b.addr, f.tree.seq, int32(si), tc)
	} else {
		var root int32
		root, x = f.tree.add(f.roots[m.fk], b.size, b.addr, int32(si), tc)
		f.roots[m.fk] = root
	}
	m.free = append(m.free, x)
	if f.mode == walkClaims && c >= 0 {
		root, _ := f.tree.addKey(f.classRoot(m.fk, c), b.size, b.addr, f.tree.nodes[x].seq, int32(si), c)
		f.setClassRoot(m.fk, c, root)
	}
}

// delFree takes back the free block of b's size at b's address added
// last to si's stream and size class (si's, unless the trace gave two
// segments one address); m is si's block model.
func (f *inferer) delFree(si int, m *segLive, b modelBlock) {
	k := m.fk
	var x int32
	if f.ownFree {
		x = f.takeOwn(si, b)
	} else {
		var root int32
		root, x = f.tree.take(f.roots[k], b.size, b.addr)
		f.roots[k] = root
	}
	if x == 0 {
		return
	}
	f.unlist(si, m, x)
}

// unlist is delFree past the free set: node x, taken from m's stream and
// size class (si's, or another segment's that shares its base), leaves
// its segment's list of free nodes.
func (f *inferer) unlist(si int, m *segLive, x int32) {
	k := m.fk
	nd := &f.tree.nodes[x] // spare now, as it was until the next add
	o := m
	if int(nd.seg) != si {
		o = f.model(int(nd.seg))
	}
	if j := slices.Index(o.free, x); j >= 0 { // a few: no call to memmove
		for ; j+1 < len(o.free); j++ {
			o.free[j] = o.free[j+1]
		}
		o.free = o.free[:len(o.free)-1]
	}
	if c := f.blockClass(int(nd.seg)); f.mode == walkClaims && c >= 0 {
		f.setClassRoot(k, c, f.tree.remove(f.classRoot(k, c), nd.size, nd.addr, nd.seq))
	}
}

// moveFree is delFree(si, m, b) then addFree(si, m, nb), for a free block
// b of segment si that a split or a merge made nb: where b's node is
// si's, nb takes it, in the free set (rekey) and in m.free, where its
// place does not matter (the walk for claims, which reads the order of
// m.free, takes the two steps).
func (f *inferer) moveFree(si int, m *segLive, b, nb modelBlock) {
	if f.mode == walkClaims {
		f.delFree(si, m, b)
		f.addFree(si, m, nb)
		return
	}
	root, x, moved := f.tree.rekey(f.roots[m.fk], b.size, b.addr, nb.size, nb.addr, int32(si), f.blockClass(si))
	f.roots[m.fk] = root
	if moved {
		return
	}
	if x != 0 {
		f.unlist(si, m, x)
	}
	f.addFree(si, m, nb)
}

// classRoot is the name of the free set of the blocks of class c of
// stream and size class k (walkClaims), 0 while it has none.
func (f *inferer) classRoot(k, c int32) int32 {
	if int(k) < len(f.byClass) && int(c) < len(f.byClass[k]) {
		return f.byClass[k][c]
	}
	return 0
}

// setClassRoot makes root that set's name.
func (f *inferer) setClassRoot(k, c, root int32) {
	if n := int(k) + 1 - len(f.byClass); n > 0 {
		f.byClass = append(f.byClass, make([][]int32, n)...)
	}
	if n := int(c) + 1 - len(f.byClass[k]); n > 0 {
		f.byClass[k] = append(f.byClass[k], make([]int32, n)...)
	}
	f.byClass[k][c] = root
}

// takeOwn is take for a walk whose free blocks are found among their
// segment's own (ownFree): segment si's free block b, the one added last
// when there are two, its node let go (0: none).
func (f *inferer) takeOwn(si int, b modelBlock) int32 {
	free := f.model(si).free
	for j := len(free) - 1; j >= 0; j-- {
		if nd := &f.tree.nodes[free[j]]; nd.size == b.size && nd.addr == b.addr {
			f.tree.spare = append(f.tree.spare, free[j])
			return free[j]
		}
	}
	return 0
}

func (f *inferer) differ(x, y int) {
	if x == y {
		return
	}
	// a segment's free blocks come one after another: its pair again
	if p := [2]int32{int32(x), int32(y)}; p != f.lastApart {
		f.lastApart = p
		f.apart.add(x, y)
	}
}

// closedPartner notes that open segment si is in another pool than
// classed segment c, of class.
func (f *inferer) closedPartner(si int, c, class int32) {
	s := &f.classes[si]
	if s.min < 0 || c < s.min {
		s.min = c
	}
	f.closedSet(s)[class/64] |= 1 << (class % 64)
}

// closedSet is the set of classes open segment s was found apart from,
// made empty at its first.
func (f *inferer) closedSet(s *segClass) []uint64 {
	if s.set < 0 {
		s.set = int32(len(f.closedSets))
		f.closedSets = append(f.closedSets, make([]uint64, f.tree.words))
	}
	return f.closedSets[s.set]
}

// closedPartners notes that open segment si is in another pool than
// classed segments, the lowest c, of the classes of mask.
func (f *inferer) closedPartners(si int, c int32, mask []uint64) {
	s := &f.classes[si]
	if s.min < 0 || c < s.min {
		s.min = c
	}
	ids := f.closedSet(s)
	for i, w := range mask {
		ids[i] |= w
	}
}

// setWhole keeps segment si's place in the set of live segments that
// are one free block (the survivors a release run leaves); m is its
// block model.
func (f *inferer) setWhole(si int, m *segLive, live bool) {
	if f.mode != walkFull {
		return
	}
	s := &f.segs[si]
	in := live && !s.broken && len(m.blocks) == 1 && m.blocks[0].free
	switch {
	case f.classOf(si) >= 0:
		if f.classOf(si) == f.defClass && in != (m.whole >= 0) {
			if in {
				f.wholeDef++
				m.whole = 0
			} else {
				f.wholeDef--
				m.whole = -1
			}
		}
	case in && m.whole < 0:
		m.whole = int32(len(f.whole))
		f.whole = append(f.whole, int32(si))
	case !in && m.whole >= 0:
		last := f.whole[len(f.whole)-1]
		f.whole[m.whole] = last
		f.model(int(last)).whole = m.whole
		f.whole = f.whole[:len(f.whole)-1]
		m.whole = -1
	}
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
		var next *trace.Event
		if i+1 < len(ev) {
			next = &ev[i+1]
		}
		f.segmentAlloc(e, base+i, next)
	case trace.ActionSegmentFree:
		j := i
		for j+1 < len(ev) && ev[j+1].Action == trace.ActionSegmentFree {
			j++
		}
		f.release(ev[i:j+1], base+i)
		return j
	case trace.ActionAlloc:
		f.alloc(base+i, e, i > 0 && ev[i-1].Action == trace.ActionSegmentAlloc && ev[i-1].Addr == e.Addr)
		f.nAllocs++
	case trace.ActionFreeCompleted:
		f.freeAt(e.Addr)
	}
	return i
}

// segmentAlloc walks segment_alloc e, the trace's event at; next is the
// event after it (nil at the end of the trace), whose request tells the
// segment's size class.
func (f *inferer) segmentAlloc(e *trace.Event, at int, next *trace.Event) {
	f.segs = append(f.segs, segmentInfo{addr: e.Addr, size: e.Size, live: f.newLive(e.Addr, e.Size), stream: f.streamIndex(e.Stream),
		born: int32(at), label: labelUnknown, firstAlloc: -1})
	si := len(f.segs) - 1
	s := &f.segs[si]
	if f.classes != nil {
		sc := segClass{-1, -1, -1}
		if c, ok := f.closedAt[e.Addr]; ok && c.born == at {
			sc.class = c.class
		}
		f.classes = append(f.classes, sc)
	}
	if next != nil && next.Action == trace.ActionAlloc && next.Addr == e.Addr {
		s.small = f.round(next.Size) <= 1<<20
	} else {
		s.small = e.Size == 2<<20
	}
	f.model(si).fk = f.keyOf(s.stream, s.small)
	if k, ok := slices.BinarySearch(f.bases, e.Addr); !ok {
		if k > 0 && f.at(e.Addr) >= 0 || k < len(f.bases) && f.bases[k] < e.Addr+e.Size {
			f.overlap = true
		}
		f.bases = insertAt(f.bases, k, e.Addr)
		f.baseSeg = insertAt(f.baseSeg, k, int32(si))
	} else { // a segment we missed the free of
		f.sharedBase = true
		o := int(f.baseSeg[k])
		f.setWhole(o, f.model(o), false)
		f.baseSeg[k] = int32(si)
	}
	m := f.model(si)
	if !f.skips(si) {
		f.addFree(si, m, m.blocks[0])
	}
	f.setWhole(si, m, true)
}

// release walks the release run run, whose first event is the trace's
// event from.
func (f *inferer) release(run []trace.Event, from int) {
	f.runOff = append(f.runOff, int32(len(f.runSegs)))
	for k := range run {
		x, ok := slices.BinarySearch(f.bases, run[k].Addr)
		if !ok {
			continue
		}
		si := int(f.baseSeg[x])
		f.runSegs = append(f.runSegs, int32(si))
		m := f.model(si)
		for _, b := range m.blocks {
			if b.free && !f.skips(si) {
				f.delFree(si, m, b)
			}
		}
		f.setWhole(si, m, false)
		// a freed segment's blocks are never looked at again
		f.spare = append(f.spare, f.segs[si].live)
		f.segs[si].live = -1
		f.bases = deleteAt(f.bases, x)
		f.baseSeg = deleteAt(f.baseSeg, x)
	}
	f.runAt = append(f.runAt, int32(from))
	f.runEnd = append(f.runEnd, int32(from+len(run)-1))
	if f.mode == walkFull {
		at := len(f.survSegs)
		f.survOff = append(f.survOff, int32(at))
		f.survSegs = append(f.survSegs, f.whole...)
		slices.Sort(f.survSegs[at:])
		f.survDef = append(f.survDef, f.wholeDef > 0)
	}
}

// skips says whether the walk leaves segment si's block model out (see
// skipOpen).
func (f *inferer) skips(si int) bool { return f.skipOpen && f.segClass[si] < 0 }

func (f *inferer) alloc(i int, e *trace.Event, isNew bool) {
	si := f.at(e.Addr)
	if si < 0 || f.skips(si) {
		return
	}
	m := f.model(si)
	f.allocIn(si, m, i, e, isNew)
	// an allocation leaves no segment one free block: only one that was
	// leaves the set
	if m.whole >= 0 {
		f.setWhole(si, m, true)
	}
}

// allocIn walks alloc event i, e, in segment si, whose block model is m.
func (f *inferer) allocIn(si int, m *segLive, i int, e *trace.Event, isNew bool) {
	if f.segOfAlloc != nil {
		f.segOfAlloc[f.nAllocs] = int32(si)
	}
	s := &f.segs[si]
	if s.firstAlloc < 0 {
		s.firstAlloc = int32(f.nAllocs)
	}
	if s.broken {
		return
	}
	k := slices.IndexFunc(m.blocks, func(b modelBlock) bool { return e.Addr >= b.addr && e.Addr < b.addr+b.size })
	r := f.round(e.Size)
	chained := false
	if k >= 0 && !m.blocks[k].free && m.lastAlloc >= 0 && m.blocks[k].addr == m.lastAddr && e.Addr > m.lastAddr {
		// inside the block just allocated here: that allocation was a
		// checkpoint restore's claim, split off exactly where best fit
		// would have kept a remainder of 1 MiB or less, and so is this one
		old := m.blocks[k]
		back := modelBlock{e.Addr, old.addr + old.size - e.Addr, true}
		m.blocks = slices.Replace(m.blocks, k, k+1, modelBlock{old.addr, e.Addr - old.addr, false}, back)
		f.addFree(si, m, back)
		f.setClaim(int(m.lastAlloc))
		k++
		chained = true
	}
	if chained || (k >= 0 && m.blocks[k].free && m.blocks[k].addr == e.Addr && (r <= 1<<20) != s.small) {
		r = (e.Size + 511) / 512 * 512 // a claim takes its recorded size
	}
	if k < 0 || !m.blocks[k].free || m.blocks[k].addr+m.blocks[k].size < e.Addr+r {
		s.broken = true
		return
	}
	m.lastAlloc, m.lastAddr = int32(i), e.Addr
	b := m.blocks[k]
	small := f.round(e.Size) <= 1<<20
	// a block that best fit would not hand out here: a claim by address
	// (CUDA graph trees restoring a checkpoint), which marks a private pool
	restore := chained || small != s.small || b.addr != e.Addr
	if !restore && !isNew {
		// a better block in the same segment means best fit was not used
		for _, x := range m.free {
			c := &f.tree.nodes[x]
			if c.size >= r && (c.size < b.size || c.size == b.size && c.addr < b.addr) && f.usable(r, c.size) {
				restore = true
				break
			}
		}
	}
	// take the block, splitting as PyTorch does. b leaves the free set
	// first only for the request that made si, whose exclusions have no
	// end (any other's range ends before b): else the block split off
	// it takes its place (moveFree)
	took := isNew
	if took {
		f.delFree(si, m, b)
	}
	if restore {
		f.setClaim(i)
		if s.label == labelUnknown || s.label == labelDefault {
			s.label, s.how = labelPrivate, howIndex(howRestore)
		}
	} else {
		f.exclude(si, m, i, r, b, isNew)
	}
	var buf [3]modelBlock
	out := buf[:0]
	if e.Addr > b.addr {
		out = append(out, modelBlock{b.addr, e.Addr - b.addr, true})
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
		out = append(out, modelBlock{e.Addr, r, false}, modelBlock{e.Addr + r, rest, true})
	} else {
		out = append(out, modelBlock{e.Addr, b.size - (e.Addr - b.addr), false})
	}
	for _, x := range out {
		switch {
		case !x.free:
		case took:
			f.addFree(si, m, x)
		default:
			f.moveFree(si, m, b, x)
			took = true
		}
	}
	if !took {
		f.delFree(si, m, b)
	}
	m.blocks = splice(m.blocks, k, k+1, out)
}

// splice is slices.Replace(blocks, lo, hi, bs...) for a segment's few
// blocks: moved one by one, not through memmove, and none cleared.
func splice(blocks []modelBlock, lo, hi int, bs []modelBlock) []modelBlock {
	n := len(blocks)
	switch d := len(bs) - (hi - lo); {
	case d > 0:
		for range d {
			blocks = append(blocks, modelBlock{})
		}
		for j := n - 1; j >= hi; j-- {
			blocks[j+d] = blocks[j]
		}
	case d < 0:
		for j := hi; j < n; j++ {
			blocks[j+d] = blocks[j]
		}
		blocks = blocks[:n+d]
	}
	for i, b := range bs {
		blocks[lo+i] = b
	}
	return blocks
}

// exclude reads the exclusions of alloc event i in segment si (whose
// block model is m), a request of r bytes that best fit served with
// block b (taken out of the free set already): every usable block best
// fit preferred (a better fit; any, for the request that made si) lies
// in another pool.
func (f *inferer) exclude(si int, m *segLive, i int, r uint64, b modelBlock, isNew bool) {
	s := &f.segs[si]
	hiSize, hiAddr, hiInf := b.size, b.addr, isNew
	if ms := f.cfg.MaxSplitSize; ms > 0 { // usable blocks are those below u
		u := ms
		if r >= ms {
			u = r + f.cfg.MaxNonSplitRounding
		}
		if hiInf || u < hiSize || u == hiSize && hiAddr > 0 {
			hiSize, hiAddr, hiInf = u, 0, false
		}
	}
	t, q := f.tree, freeRange{r, hiSize, hiAddr, hiInf}
	switch f.mode {
	case walkDetect:
		f.anyApart = f.anyApart || t.any(f.roots[m.fk], &q)
	case walkClaims:
		if c := f.segClass[si]; c >= 0 && t.any(f.classRoot(m.fk, c), &q) {
			f.setClaim(i)
		}
	case walkFull:
		class := f.classOf(si)
		sum := freeSum{minSeg: math.MaxInt32, mask: f.mask}
		clear(sum.mask)
		sum.each = func(o int32) {
			switch {
			case int(o) == si:
			case class < 0:
				f.differ(si, int(o))
			default:
				f.closedPartner(int(o), int32(si), class)
			}
		}
		t.sum(f.roots[m.fk], &q, &sum)
		if sum.n == 0 {
			return
		}
		f.anyApart = true
		if sum.n > sum.open {
			if class < 0 {
				f.closedPartners(si, sum.minSeg, sum.mask)
			} else if sum.mask[class/64]&(1<<(class%64)) != 0 {
				s.samePass = true
			}
		}
	}
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
	if si < 0 || f.skips(si) {
		return
	}
	m := f.model(si)
	f.freeIn(si, m, addr)
	// a free leaves a segment one free block, or one that was in the set
	// of those no longer one: any other keeps its place (out of the set)
	if len(m.blocks) == 1 || m.whole >= 0 {
		f.setWhole(si, m, true)
	}
}

// freeIn walks the free_completed at addr, in segment si, whose block
// model is m.
func (f *inferer) freeIn(si int, m *segLive, addr uint64) {
	s := &f.segs[si]
	if s.broken {
		return
	}
	k := slices.IndexFunc(m.blocks, func(b modelBlock) bool { return b.addr == addr })
	if k < 0 || m.blocks[k].free {
		s.broken = true
		return
	}
	b := modelBlock{addr, m.blocks[k].size, true}
	lo, hi := k, k+1
	if k > 0 && m.blocks[k-1].free {
		lo = k - 1
		b.addr, b.size = m.blocks[lo].addr, b.size+m.blocks[lo].size
	}
	if k+1 < len(m.blocks) && m.blocks[k+1].free {
		hi = k + 2
		b.size += m.blocks[k+1].size
	}
	// the neighbours leave the free set in address order, and the merged
	// block takes the node of the last (moveFree), as delFree and addFree
	// would
	switch {
	case hi == k+2:
		if lo < k {
			f.delFree(si, m, m.blocks[lo])
		}
		f.moveFree(si, m, m.blocks[k+1], b)
	case lo < k:
		f.moveFree(si, m, m.blocks[lo], b)
	default:
		f.addFree(si, m, b)
	}
	m.blocks = splice(m.blocks, lo, hi, []modelBlock{b})
}

// classKey orders segments as release_cached_blocks frees them within one
// pool: large before small, then by (stream, size, address).
func (f *inferer) classKey(si int) [4]uint64 {
	s := &f.segs[si]
	c := uint64(0)
	if s.small {
		c = 1
	}
	return [4]uint64{c, f.streamIDs[s.stream], s.size, s.addr}
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
// a walk that only looks for evidence of private pools).
func (f *inferer) setClaim(i int) {
	if f.claim != nil {
		f.claim.set(i)
	}
}
