package replay

import (
	"cmp"
	"slices"
	"sort"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// This file is the block model pool inference walks (docs/pytorch-allocator.md
// §19.4): each segment's blocks split and merged as PyTorch does, best fit
// within a stream and size class, and the evidence the walk collects on the
// way: exclusions, release runs with their survivors, and checkpoint
// restores.

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

func (f *inferer) at(addr uint64) int {
	k := sort.Search(len(f.bases), func(i int) bool { return f.bases[i] > addr }) - 1
	if k < 0 {
		return -1
	}
	s := f.segs[f.live[f.bases[k]]]
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

func (f *inferer) key(s *segmentInfo) freeKey { return freeKey{s.stream, s.small} }

func (f *inferer) addFree(si int, b modelBlock) {
	k := f.key(f.segs[si])
	e := freeEnt{b.size, b.addr, int32(si)}
	v := f.free[k]
	i, _ := slices.BinarySearchFunc(v, e, cmpEnt)
	f.free[k] = slices.Insert(v, i, e)
}

func (f *inferer) delFree(si int, b modelBlock) {
	k := f.key(f.segs[si])
	v := f.free[k]
	if i, ok := slices.BinarySearchFunc(v, freeEnt{b.size, b.addr, 0}, cmpEnt); ok {
		f.free[k] = slices.Delete(v, i, i+1)
	}
}

func (f *inferer) differ(x, y int) {
	if x == y {
		return
	}
	f.apart[[2]int{min(x, y), max(x, y)}] = true
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
		s := &segmentInfo{addr: e.Addr, size: e.Size, stream: e.Stream, born: base + i, label: labelUnknown,
			blocks: []modelBlock{{e.Addr, e.Size, true}}, firstAlloc: -1, lastAlloc: -1}
		if i+1 < len(ev) && ev[i+1].Action == trace.ActionAlloc && ev[i+1].Addr == e.Addr {
			s.small = f.round(ev[i+1].Size) <= 1<<20
		} else {
			s.small = e.Size == 2<<20
		}
		f.segs = append(f.segs, s)
		si := len(f.segs) - 1
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
		s := f.segs[si]
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
		s := f.segs[si]
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
	if f.segOfAlloc != nil {
		f.segOfAlloc[i] = int32(si)
	}
	s := f.segs[si]
	if s.firstAlloc < 0 {
		s.firstAlloc = i
	}
	if s.broken {
		return
	}
	k := slices.IndexFunc(s.blocks, func(b modelBlock) bool { return e.Addr >= b.addr && e.Addr < b.addr+b.size })
	r := f.round(e.Size)
	chained := false
	if k >= 0 && !s.blocks[k].free && s.lastAlloc >= 0 && s.blocks[k].addr == s.lastAddr && e.Addr > s.lastAddr {
		// inside the block just allocated here: that allocation was a
		// checkpoint restore's claim, split off exactly where best fit
		// would have kept a remainder of 1 MiB or less, and so is this one
		old := s.blocks[k]
		back := modelBlock{e.Addr, old.addr + old.size - e.Addr, true}
		s.blocks = slices.Replace(s.blocks, k, k+1, modelBlock{old.addr, e.Addr - old.addr, false}, back)
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
		if s.label == labelUnknown || s.label == labelDefault {
			s.label, s.how = labelPrivate, howRestore
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
				if f.claim != nil {
					f.passed = append(f.passed, passing{event: i, seg: int32(si), other: c.seg})
				}
			}
		}
	}
	// take the block, splitting as PyTorch does
	f.delFree(si, b)
	var out []modelBlock
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
	s := f.segs[si]
	if s.broken {
		return
	}
	k := slices.IndexFunc(s.blocks, func(b modelBlock) bool { return b.addr == addr })
	if k < 0 || s.blocks[k].free {
		s.broken = true
		return
	}
	b := modelBlock{addr, s.blocks[k].size, true}
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
	s := f.segs[si]
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
// passing is an allocation (event) in segment seg that passed over a
// free block of segment other that best fit would have taken.
type passing struct {
	event      int
	seg, other int32
}

// passedClaims marks as claims the allocations that passed over a block
// of their own private pool: best fit within the pool would have taken
// it, so the allocation took its block by address — a CUDA graph tree's
// checkpoint restore (setCheckpointPoolState's alloc_found_block), whose
// blocks go back where the checkpoint had them. Read as exclusions while
// walking, they are contradicted by the labels (the snapshot's pool ids
// say both segments are one pool's).
func (f *inferer) passedClaims() {
	for _, p := range f.passed {
		if l := f.segs[p.seg].label; l > 0 && l == f.segs[p.other].label {
			f.setClaim(p.event)
		}
	}
}

func (f *inferer) setClaim(i int) {
	if f.claim != nil {
		f.claim[i] = true
	}
}
