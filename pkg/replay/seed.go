package replay

import (
	"slices"
	"sort"
	"sync"

	"github.com/gpumem/gpumem/pkg/alloc"
	"github.com/gpumem/gpumem/pkg/trace"
)

// Seed is a segment that existed before the first kept event of a
// truncated trace, with the blocks live in it then.
type Seed struct {
	Address, Size, Stream uint64
	Small                 bool
	Blocks                []alloc.SeedBlock
}

// Skip reasons of seeding.
const (
	SkipExpandableSeed = "expandable segment older than the trace (not rebuilt)"
	SkipOrphanBlock    = "block live before the trace outside any known segment"
)

type seedBlock struct {
	requested, size uint64
	pending         bool
}

// FromSnapshot plans the replay of one device's trace. When the trace was
// cut short by max_entries (as most real snapshots are), the allocator's
// state at the first kept event is rebuilt by walking the trace backwards
// from the snapshot's final segments, as PyTorch's memory viewer does:
// undoing a segment_alloc removes the segment, undoing a segment_free brings
// it back, undoing an alloc frees its block, undoing a free brings the block
// back. What is left at the start becomes the plan's Seeds, and the replay
// starts from there.
func FromSnapshot(snap *trace.Snapshot, device int) *Plan {
	return fromSnapshot(snap, device, true, nil)
}

// FromSnapshotAhead is [FromSnapshot] in two steps, for a caller with
// cores to spare: ahead makes the plan as if the trace used no private
// pool (CUDA graphs, MemPool), as most do, without inferring them; settle
// infers them (about two thirds of FromSnapshot's time) and returns the
// plan FromSnapshot would: ahead's plan itself when the trace used none,
// else a new plan. The two may run at once, each as often as wanted (the
// work is done once; later calls return the same plan), and settle waits
// for ahead only to return its plan. The caller may replay ahead's plan
// while settle runs, and drop the snapshot's events once this returns:
// neither reads its Traces field then. It changes neither plan. A
// snapshot whose final segments name a private pool (a captured CUDA
// graph's, kept to the end) is planned with its pools at once, and both
// return that plan.
func FromSnapshotAhead(snap *trace.Snapshot, device int) (ahead, settle func() *Plan) {
	kept := *snap
	for _, s := range deviceSegments(snap, device) {
		if s.PoolID != [2]int64{} {
			p := sync.OnceValue(func() *Plan { return FromSnapshot(&kept, device) })
			return p, p
		}
	}
	ahead = sync.OnceValue(func() *Plan { return fromSnapshot(&kept, device, false, nil) })
	return ahead, sync.OnceValue(func() *Plan {
		pp := inferPools(kept.Traces[device], deviceSegments(&kept, device), settingsConfig(kept.Settings))
		if pp == nil {
			return ahead()
		}
		return fromSnapshot(&kept, device, false, pp)
	})
}

// fromSnapshot is FromSnapshot: infer true infers the trace's private
// pools, else they are pp's (nil: none).
func fromSnapshot(snap *trace.Snapshot, device int, infer bool, pp *poolPlan) *Plan {
	events := snap.Traces[device]
	segs, live := finalState(snap, device)
	for i := len(events) - 1; i >= 0; i-- {
		e := &events[i]
		switch e.Action {
		case trace.ActionSegmentAlloc:
			delete(segs, e.Addr)
		case trace.ActionSegmentFree:
			segs[e.Addr] = segState{size: e.Size, stream: e.Stream, small: e.Size == 2<<20}
		case trace.ActionAlloc:
			delete(live, e.Addr)
		case trace.ActionFreeCompleted:
			if _, ok := live[e.Addr]; !ok {
				live[e.Addr] = seedBlock{requested: e.Size, pending: true}
			}
		case trace.ActionFreeRequested:
			b := live[e.Addr]
			live[e.Addr] = seedBlock{requested: e.Size, size: b.size}
		}
	}
	p := newPlan()
	defer p.noteSnapshot(snap, device, events) // once the plan is built
	p.seed(segs, live)
	if infer {
		p.build(events, deviceSegments(snap, device), settingsConfig(snap.Settings))
	} else {
		p.buildWith(events, settingsConfig(snap.Settings), pp)
	}
	return p
}

// segState is a segment as the walk back from the end rebuilds it.
type segState struct {
	size, stream uint64
	small, exp   bool
}

// finalState is the device's segments and live blocks at the end of the
// snapshot, by address.
func finalState(snap *trace.Snapshot, device int) (map[uint64]segState, map[uint64]seedBlock) {
	// sized once from the final segments: a map grown key by key leaves
	// its smaller tables behind as garbage
	final := deviceSegments(snap, device)
	blocks := 0
	for _, s := range final {
		for _, b := range s.Blocks {
			if b.State != trace.BlockInactive {
				blocks++
			}
		}
	}
	segs := make(map[uint64]segState, len(final))
	live := make(map[uint64]seedBlock, blocks)
	for _, s := range final {
		segs[s.Address] = segState{s.TotalSize, s.Stream, s.Small, s.Expandable}
		for _, b := range s.Blocks {
			if b.State != trace.BlockInactive {
				live[b.Address] = seedBlock{b.RequestedSize, b.Size, b.State == trace.BlockPendingFree}
			}
		}
	}
	return segs, live
}

// deviceSegments is the snapshot's final segments of device, which the
// caller must not change: when they are all the device's (one device, the
// usual case), snap.Segments itself, not a copy (a planning read asks for
// them several times; a copy is ~100 bytes a segment).
func deviceSegments(snap *trace.Snapshot, device int) []trace.Segment {
	n := 0
	for i := range snap.Segments {
		if snap.Segments[i].Device == device {
			n++
		}
	}
	switch n {
	case 0:
		return nil
	case len(snap.Segments):
		return slices.Clip(snap.Segments) // an append copies
	}
	final := make([]trace.Segment, 0, n)
	for _, s := range snap.Segments {
		if s.Device == device {
			final = append(final, s)
		}
	}
	return final
}

// seed makes the segments and live blocks the trace began in the plan's
// Seeds; none when the trace began with none (it was not truncated).
// Expandable segments are not rebuilt: the walk back does not undo their
// pages, so their final ranges say nothing of the start; noteStart tells
// from the reserved bytes whether pages were mapped before the trace.
func (p *Plan) seed(segs map[uint64]segState, live map[uint64]seedBlock) {
	for a, s := range segs {
		if s.exp {
			delete(segs, a)
		}
	}
	if len(segs) == 0 && len(live) == 0 {
		return
	}
	// place the live blocks in their segments, both in address order
	bases := make([]uint64, 0, len(segs))
	for a := range segs {
		bases = append(bases, a)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	addrs := make([]uint64, 0, len(live))
	for a := range live {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	byBase := map[uint64]*Seed{}
	for _, a := range bases {
		s := segs[a]
		seed := &Seed{Address: a, Size: s.size, Stream: s.stream, Small: s.small}
		p.Seeds = append(p.Seeds, seed)
		byBase[a] = seed
	}
	for _, addr := range addrs {
		k := sort.Search(len(bases), func(i int) bool { return bases[i] > addr }) - 1
		seed := (*Seed)(nil)
		if k >= 0 && addr < bases[k]+segs[bases[k]].size {
			seed = byBase[bases[k]]
		}
		if seed == nil {
			p.Skipped[SkipOrphanBlock]++
			continue
		}
		b := live[addr]
		id := p.newID()
		seed.Blocks = append(seed.Blocks, alloc.SeedBlock{Offset: addr - seed.Address, Size: b.size,
			Requested: b.requested, ID: id, Pending: b.pending})
		p.byAddr.Set(addr, live1{id: id, pending: b.pending})
		p.Seeded++
	}
	p.Truncated = true
}

// noteStart notes what the device held when the trace began (reserved0,
// from the final segments less what the segment events added): pages of
// expandable segments mapped before the first event make the trace
// truncated too. A full history, expandable or not, starts from nothing
// (docs/pytorch-allocator.md §15).
func (p *Plan) noteStart(reserved0 uint64) {
	var seeded uint64
	for _, s := range p.Seeds {
		seeded += s.Size
	}
	if reserved0 > seeded {
		p.Skipped[SkipExpandableSeed]++
		p.Truncated = true
	}
}
