package pipeline

import (
	"github.com/gpumem/gpumem/pkg/alloc"
)

// maxPeakUndo is the most changes a peakSet keeps since its peak: past
// it, it gives up until a higher peak (addCategories then replays to the
// peak) and lets its list go. The list (up to 128 KiB: no more changes
// than the plan has ops) is made whole: grown by append, its garbage
// would come to several times that, in heap and page faults.
const maxPeakUndo = 1 << 13

// peakSet keeps, beside the report's replay (catRide), what it takes to
// list the allocations live at the highest point of allocated memory the
// ride has kept, so that addCategories needs no replay to the peak: the
// changes the ops made to the live allocations since that point, each
// with what it undid (the block a free freed: replay.Options.BlockSizes).
// Undone from the replay's final state, they give the state at the peak.
// It costs nothing per op while it keeps no changes.
type peakSet struct {
	undo   []peakUndo // the changes since op at, in order
	best   int64      // allocated memory after op at
	at     int        // -1: no point kept yet
	keep   bool       // keeping changes: a point, and not lost
	lost   bool       // more changes than maxPeakUndo since op at, or a freed block's size untold
	rising bool       // the last batch reached a new highest point (or none ran yet)
	most   int        // the most changes to keep: maxPeakUndo, or fewer for a short plan
}

// peakUndo is a change to allocation id, which before it had a block of
// size bytes (0: none) made by the op of event (as evOf).
type peakUndo struct {
	id    uint32
	event int32
	size  uint64
}

// newPeakSet is the peakSet of a plan of n ops.
func newPeakSet(n int) *peakSet { return &peakSet{at: -1, rising: true, most: min(n, maxPeakUndo)} }

// add keeps a change to allocation id, which held size bytes before it
// (made by the op of event).
func (p *peakSet) add(id uint32, event int32, size uint64) {
	if len(p.undo) == p.most {
		p.lost, p.keep, p.undo = true, false, nil
		return
	}
	p.undo = append(p.undo, peakUndo{id, event, size})
}

// log keeps the changes ops are about to make to c's live allocations,
// sizes the sizes of the blocks they free (by op index), while it keeps
// changes. It reads c before any of ops ran: a free's record of the op
// that made its allocation is stale where that op is among ops too, but
// that allocation's own record, later in the undoing, overrides it.
func (p *peakSet) log(ops []alloc.Op, sizes []uint64, c *catPass) {
	for k := range ops {
		if !p.keep {
			return
		}
		switch op := &ops[k]; op.Kind {
		case alloc.OpAlloc: // the id held nothing before
			p.add(op.ID, 0, 0)
		case alloc.OpFree, alloc.OpFreeRequest:
			p.add(op.ID, c.eventOf(op.ID), sizes[k])
		}
	}
}

// point says that allocated memory was allocated after op i, the last
// one run: a new highest point starts the changes over. sized says
// whether the batch of op i tells the sizes of the blocks it frees: a
// new point in one that does not is lost (the batches that follow one
// do: catRide.wantSizes).
func (p *peakSet) point(i int, allocated int64, sized bool) {
	if p.at < 0 || allocated > p.best {
		p.at, p.best, p.rising = i, allocated, true
		p.lost, p.keep, p.undo = !sized, sized, p.undo[:0]
		if sized && p.undo == nil {
			p.undo = make([]peakUndo, 0, p.most)
		}
	}
}

// blocks lists the allocations live after op peak from segs, the
// allocator's state at the replay's end, whose allocations were made by
// the ops of the events evOf gives (by allocation id), and whether it
// can: not when peak is not the point it kept, or it lost the changes
// since.
func (p *peakSet) blocks(peak int, segs []alloc.Segment, evOf func(id uint32) int32) ([]peakBlock, bool) {
	if p == nil || p.lost || p.at != peak {
		return nil, false
	}
	var live []peakUndo // by allocation id, as it was after op peak
	set := func(u peakUndo) {
		if int(u.id) >= len(live) {
			live = append(live, make([]peakUndo, int(u.id)+1-len(live))...)
		}
		live[u.id] = u
	}
	for _, s := range segs {
		for _, b := range s.Blocks {
			if b.State == alloc.BlockAllocated {
				set(peakUndo{b.ID, evOf(b.ID), b.Size})
			}
		}
	}
	for k := len(p.undo) - 1; k >= 0; k-- {
		set(p.undo[k])
	}
	var bs []peakBlock
	for id, l := range live {
		if l.size == 0 {
			continue
		}
		if l.event < -1 {
			return nil, false // none made it: a seeded block, not kept here
		}
		bs = append(bs, peakBlock{id: uint32(id), size: l.size, event: l.event})
	}
	return bs, true
}

// peakBlock is an allocated block at the peak: its allocation id, size,
// address, and the event of the op that made it (-1: none classifies it,
// -2: none made it, the address tells).
type peakBlock struct {
	id      uint32
	size    uint64
	address uint64
	event   int32
}
