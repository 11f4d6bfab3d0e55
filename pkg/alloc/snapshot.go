package alloc

/*
#include <stdlib.h>
#include "gm_alloc.h"
*/
import "C"

import "unsafe"

// BlockState is what a block holds.
type BlockState uint8

// Block states, named as PyTorch's snapshots name them.
const (
	BlockInactive    BlockState = iota // free
	BlockAllocated                     // "active_allocated"
	BlockPendingFree                   // "active_pending_free": freed, still used by another stream
)

func (s BlockState) String() string {
	switch s {
	case BlockAllocated:
		return "active_allocated"
	case BlockPendingFree:
		return "active_pending_free"
	}
	return "inactive"
}

// Block is one block of a snapshot.
type Block struct {
	Address, Size, RequestedSize uint64
	ID                           uint32 // allocation id; meaningful unless inactive
	State                        BlockState
}

// Segment is one segment of a snapshot, blocks in address order. An
// expandable segment shows as one Segment per mapped run, as in PyTorch.
type Segment struct {
	Address, TotalSize, AllocatedSize, ActiveSize, RequestedSize uint64
	Stream                                                       uint64
	Small, Expandable                                            bool
	Pool                                                         uint32 // 0 = default, else the private pool (Op.Pool)
	Blocks                                                       []Block
}

// Snapshot returns the segments and their blocks, in address order.
func (a *Allocator) Snapshot() []Segment {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ns, nb C.size_t
	C.gm_snapshot(a.c, nil, 0, nil, 0, &ns, &nb)
	if ns == 0 {
		return []Segment{}
	}
	segs := (*C.gm_segment_info_t)(C.malloc(ns * C.sizeof_gm_segment_info_t))
	defer C.free(unsafe.Pointer(segs))
	blks := (*C.gm_block_info_t)(C.malloc((nb + 1) * C.sizeof_gm_block_info_t))
	defer C.free(unsafe.Pointer(blks))
	C.gm_snapshot(a.c, segs, ns, blks, nb, &ns, &nb)
	cs := unsafe.Slice(segs, int(ns))
	cb := unsafe.Slice(blks, int(nb))
	out := make([]Segment, len(cs))
	for i, s := range cs {
		seg := Segment{
			Address: uint64(s.address), TotalSize: uint64(s.total_size),
			AllocatedSize: uint64(s.allocated_size), ActiveSize: uint64(s.active_size),
			RequestedSize: uint64(s.requested_size), Stream: uint64(s.stream),
			Small: s.is_small != 0, Expandable: s.is_expandable != 0, Pool: uint32(s.pool),
			Blocks: make([]Block, int(s.nblocks)),
		}
		for j := range seg.Blocks {
			b := cb[int(s.first_block)+j]
			seg.Blocks[j] = Block{Address: uint64(b.address), Size: uint64(b.size),
				RequestedSize: uint64(b.requested_size), ID: uint32(b.id), State: BlockState(b.state)}
		}
		out[i] = seg
	}
	return out
}

// FlatBlock is one block of AppendBlocks' flat snapshot. It has the layout
// of C's gm_flat_block_t (BlockSteps reads C's in place).
type FlatBlock struct {
	Address, Size uint64
	SegSize       uint64 // the segment's size on its first block, 0 on the others
	SegBlocks     uint32 // how many blocks its segment has
	ID            uint32 // allocation id; meaningful unless inactive
	State         BlockState
}

// SnapshotBuffer is C memory that AppendBlocks reuses from call to call,
// for callers that look at the blocks after every operation. Free it
// when done.
type SnapshotBuffer struct {
	segs       *C.gm_segment_info_t
	blks       *C.gm_block_info_t
	nseg, nblk C.size_t
}

// Free releases the buffer's memory.
func (b *SnapshotBuffer) Free() {
	C.free(unsafe.Pointer(b.segs))
	C.free(unsafe.Pointer(b.blks))
	*b = SnapshotBuffer{}
}

// AppendBlocks appends every block, in address order, to dst: Snapshot's
// blocks without a Go allocation per segment.
func (a *Allocator) AppendBlocks(dst []FlatBlock, buf *SnapshotBuffer) []FlatBlock {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ns, nb C.size_t
	for {
		C.gm_snapshot(a.c, buf.segs, buf.nseg, buf.blks, buf.nblk, &ns, &nb)
		if ns <= buf.nseg && nb <= buf.nblk {
			break
		}
		buf.Free()
		buf.nseg, buf.nblk = 2*ns+16, 2*nb+16
		buf.segs = (*C.gm_segment_info_t)(C.malloc(buf.nseg * C.sizeof_gm_segment_info_t))
		buf.blks = (*C.gm_block_info_t)(C.malloc(buf.nblk * C.sizeof_gm_block_info_t))
	}
	if ns == 0 {
		return dst
	}
	cs := unsafe.Slice(buf.segs, int(ns))
	cb := unsafe.Slice(buf.blks, int(nb))
	for _, s := range cs {
		for j := range int(s.nblocks) {
			b := cb[int(s.first_block)+j]
			f := FlatBlock{Address: uint64(b.address), Size: uint64(b.size), SegBlocks: uint32(s.nblocks),
				ID: uint32(b.id), State: BlockState(b.state)}
			if j == 0 {
				f.SegSize = uint64(s.total_size)
			}
			dst = append(dst, f)
		}
	}
	return dst
}

// BlockSteps follows an allocator's block list (AppendBlocks's) from one
// op to the next (Run), doing the walk and the comparison in C: what a
// caller that looks at the list after every op needs, at the cost of a
// walk, not of a copy of the list into Go. Free it when done.
type BlockSteps struct {
	f C.gm_flat_t
	s C.gm_steps_t
}

// Blocks appends the whole block list after the last op Run applied to dst.
// The list is kept in C segment by segment and made whole when asked.
func (s *BlockSteps) Blocks(dst []FlatBlock) []FlatBlock {
	if s.f.ncur == 0 || C.gm_flat_list(&s.f) != C.GM_OK {
		return dst
	}
	return append(dst, flatIn(s.f.cur, int(s.f.ncur))...)
}

// Free releases what the steps hold in C.
func (s *BlockSteps) Free() {
	C.gm_flat_free(&s.f)
	C.gm_steps_free(&s.s)
}

// BlockChange is what one op of BlockSteps.Run did to the block list:
// Del blocks from Pos on replaced by Ins; the list then held N blocks,
// and Whole, on the ops Run gives it after, is the whole list. Blocks are
// compared by address, size, segment size, id and state: a block left in
// place may keep the block count (SegBlocks) its segment had before. Peak
// says the op raised the reserved peak: Extra.PeakOp is now this op; with
// KeepPeaks, the last such op of a Run also has the whole list after it
// in PeakList.
type BlockChange struct {
	Pos, Del, N int
	Ins, Whole  []FlatBlock
	Peak        bool
	PeakList    []FlatBlock
}

// KeepPeaks makes Run keep the whole list after each op that raises the
// reserved peak (for a caller that learns which op the peak is only at
// the end): each Run hands its last such op's list to Changes
// (BlockChange.PeakList), at the cost of a copy of the list per op that
// raises the peak.
func (s *BlockSteps) KeepPeaks() { s.s.keep_peak = 1 }

// Run applies ops to a one at a time, as a's Run would (their indexes
// from base, tl sampled, the out-of-memory errors the recording had gone
// past), following the block list after each, in one call into C;
// Changes then reads each op's change, the failing op's too when Run
// stopped at an out-of-memory. Run gives the whole list after an op where
// the changes since the last whole list (of this BlockSteps) hold as many
// blocks as the list and keyGap ops (keyGap > 0) have passed since; the
// list now is Blocks.
func (s *BlockSteps) Run(a *Allocator, ops []Op, base, keyGap int, tl *Timeline) (Result, error) {
	if len(ops) == 0 {
		return Result{}, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runLocked(ops, base, tl, func(ctl *C.gm_timeline_t, done *C.size_t, oom *C.gm_oom_t) C.int {
		// Op has no Go pointers and the layout of gm_op_t, so C may read the
		// slice in place.
		rc := C.gm_run_steps(a.c, (*C.gm_op_t)(unsafe.Pointer(&ops[0])), C.size_t(len(ops)), C.uint64_t(base),
			C.uint64_t(keyGap), ctl, &s.f, &s.s, done)
		if rc == C.GM_ENOMEM { // the failing op is not applied, as gm_run counts
			*done, *oom = *done-1, s.s.oom
		}
		return rc
	})
}

// Changes hands f each op's change of the last Run, in order, in one
// BlockChange it rewrites for each (a million ops' changes pass through
// it: a pointer, not eight words copied); the change and its slices are
// valid only during the call (the slices are the C memory Run wrote,
// read in place).
func (s *BlockSteps) Changes(f func(j int, c *BlockChange) bool) {
	hs := unsafe.Slice(s.s.ops, int(s.s.nops))
	blocks := flatIn(s.s.blocks, int(s.s.nblocks))
	off := 0
	var c BlockChange
	for j := range hs {
		h := &hs[j]
		c.Pos, c.Del, c.N, c.Peak = int(h.pos), int(h.del), int(h.nlist), h.peak != 0
		c.Ins = blocks[off : off+int(h.nins) : off+int(h.nins)]
		off += int(h.nins)
		c.Whole, c.PeakList = nil, nil
		if s.s.peak_in != 0 && j == int(s.s.peak_at) {
			c.PeakList = flatIn(s.s.peak, int(s.s.npeak))
			if c.PeakList == nil {
				c.PeakList = []FlatBlock{} // an empty list, not none
			}
		}
		if h.key != 0 {
			c.Whole = blocks[off : off+int(h.nlist) : off+int(h.nlist)]
			off += int(h.nlist)
		}
		if !f(j, &c) {
			return
		}
	}
}

// flatIn is C's n blocks at p as FlatBlocks, in place: FlatBlock has
// gm_flat_block_t's layout (TestFlatBlockLayout, and a static assertion
// in gm_steps.c).
func flatIn(p *C.gm_flat_block_t, n int) []FlatBlock {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*FlatBlock)(unsafe.Pointer(p)), n)
}
