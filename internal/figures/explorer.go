package figures

import (
	"errors"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// Explorer is what the HTML report's explorer draws for one device: every
// allocation's lifetime, what each operation did to the allocator's blocks
// (so that the page can rebuild the segment map after any operation), the
// recorded times and the annotated spans.
type Explorer struct {
	Device int
	Ops    int     // operations applied (through the failing one at an OOM)
	TimeUS []int64 // the recorded time of each op; nil when the trace has none
	Allocs []Lifetime
	// Stacks are the recorded stacks, each a list of indexes into Frames,
	// innermost first; User[k] says Frames[k] is the program's own code
	// rather than PyTorch's.
	Stacks [][]int32
	Frames []string
	User   []bool
	// Changes[i] is what op i did to the allocator's blocks.
	Changes []Change
	// Keys are the whole block list after some ops, so that the page
	// rebuilds any op's list from the last key before it.
	Keys   []Keyframe
	Spans  []Span
	PeakOp int // the op after which reserved memory peaked
	OOMOp  int // the failing op, -1 when none
	// OOMSize is the failing request's size, OOMRounded after rounding.
	OOMSize, OOMRounded uint64
	Verdict             string // the OOM verdict, "" when none
	// Categories name the allocations' categories (Lifetime.Category);
	// nil when the run has none. CategorySeries samples the bytes each
	// held (as asked) over the ops, at most a few thousand points.
	Categories     []string
	CategorySeries []CategoryPoint
}

// CategoryPoint is what each category held after op Op, in
// Explorer.Categories order.
type CategoryPoint struct {
	Op    int
	Bytes []uint64
}

// Lifetime is one allocation: made by op Start, freed by op End (Ops when
// still live at the end), its block given back by op Released (later than
// End while another stream still used it).
type Lifetime struct {
	Start, End, Released int32
	Size, Address        uint64 // as asked; where this replay put it
	Stream               uint64
	Stack                int32 // index into Stacks, -1 when none
	// Category is 1 + its index into Explorer.Categories, 0 when none.
	Category uint8
}

// Change is what one op did to the allocator's blocks, all segments' blocks
// taken as one list in address order: Del blocks from Pos on were replaced
// by Ins.
type Change struct {
	Pos, Del int32
	Ins      []BlockRec
}

// Keyframe is the block list after the first Op ops.
type Keyframe struct {
	Op     int
	Blocks []BlockRec
}

// BlockRec is one block of the explorer's block list.
type BlockRec struct {
	Address, Size uint64
	State         ExplorerState
	First         bool   // the first block of its segment
	SegSize       uint64 // the segment's size, on its first block
	Alloc         int32  // index into Allocs for a used block, -1 otherwise
}

// ExplorerState is a block's state as the explorer colours it.
type ExplorerState uint8

// The explorer's block states: a free block is "inactive split" when its
// segment holds other blocks (PyTorch's inactive_split), "free" when it is
// the whole segment (a release would return it).
const (
	StateFree ExplorerState = iota
	StateSplit
	StateAllocated
	StatePending
)

// Span is a named stretch of operations: a record_function range or an
// annotation without an end (End = Start).
type Span struct {
	Name       string
	Start, End int
}

// ExplorerSink takes one device's explorer data as a replay stepped one op
// at a time makes it, so that the page's builder packs it as it comes
// instead of holding the whole Explorer: for each op i in order, Alloc
// for each allocation op i made (the seeds before op 0), Freed and
// Released for those it ended, then Op; Key after the op a key follows.
// The slices it is handed are only valid during the call.
type ExplorerSink interface {
	Start(s ExplorerStart)
	// Alloc is allocation k (numbered in order from 0), made by op
	// a.Start; its End and Released are Ops until Freed and Released say
	// otherwise. a is valid only during the call (a pointer: the
	// pipeline's copy of a Lifetime, passed by value, would stall).
	Alloc(k int32, a *Lifetime)
	Freed(k, op int32, size uint64)
	Released(k, op int32)
	// Op is what op i did to the blocks, at the recorded time t (0 when
	// untimed).
	Op(i int, t int64, ch Change)
	Key(op int, blocks []BlockRec)
	// First is the block list after the first op ops, where the page's
	// scrubber starts (the out-of-memory's op, else the peak's); it comes
	// once, after that op's Op or, when the peak is known only at the end,
	// before Finish.
	First(op int, blocks []BlockRec)
	// Finish ends the device: Start's Head now holds its Spans,
	// CategorySeries and Verdict, and its PeakOp and out-of-memory.
	Finish() error
}

// ExplorerFlatSink is an ExplorerSink that takes an op's inserted blocks
// as the allocator lists them (OpFlat, in place of Op), so that a sink
// packing them reads each block once: turned into BlockRecs first, the
// million-odd blocks of a big trace would be written and read again,
// 4% of replay --html's instructions.
type ExplorerFlatSink interface {
	ExplorerSink
	// OpFlat is Op with the change's inserted blocks ins as
	// alloc.BlockSteps hands them: each is the BlockRec that BlockRecOf
	// makes of it, the allocation of a used one found in ix.
	OpFlat(i int, t int64, pos, del int32, ins []alloc.FlatBlock, ix *AllocIndex)
}

// AllocIndex finds the explorer's allocation (its index k among Allocs)
// that holds an allocator's allocation id: of the allocations live, by id.
type AllocIndex struct {
	// Dense[id] is 1 + k for an id below len(Dense), 0 none; the others
	// (ids of DenseIDs on) are in Sparse.
	Dense  []int32
	Sparse map[uint32]int32
}

// DenseIDs is the most ids an AllocIndex keeps in Dense.
const DenseIDs = 1 << 20

// Of is the allocation that holds id, -1 when none.
func (x *AllocIndex) Of(id uint32) int32 {
	if int(id) < len(x.Dense) {
		return x.Dense[id] - 1
	}
	if k, ok := x.Sparse[id]; ok {
		return k
	}
	return -1
}

// BlockRecOf is the explorer's record of the allocator's block b: a used
// block's record names the allocation ix finds under its id.
func BlockRecOf(b *alloc.FlatBlock, ix *AllocIndex) BlockRec {
	r := BlockRec{Address: b.Address, Size: b.Size, SegSize: b.SegSize, First: b.SegSize != 0, State: StateOf(b), Alloc: -1}
	if r.State >= StateAllocated {
		r.Alloc = ix.Of(b.ID)
	}
	return r
}

// StateOf is the explorer's state of the allocator's block b.
func StateOf(b *alloc.FlatBlock) ExplorerState {
	switch {
	case b.State == alloc.BlockAllocated:
		return StateAllocated
	case b.State == alloc.BlockPendingFree:
		return StatePending
	case b.SegBlocks > 1:
		return StateSplit
	}
	return StateFree
}

// ExplorerStart is what an ExplorerSink knows before the first op.
type ExplorerStart struct {
	// Head is the device's Explorer without Allocs, Changes or Keys.
	Head *Explorer
	// Timed says each op comes with its recorded time.
	Timed bool
	// Allocs is how many allocations there will be; Sizes hands their
	// sizes to yield in order, for a sink that must rank them first.
	Allocs int
	Sizes  func(yield func(size uint64)) error
}

// ErrExplorerAgain is an ExplorerSink's Finish asking for the ops once
// more from Start: what it learned on the way changes how it packs.
var ErrExplorerAgain = errors.New("explorer: step through the ops again")

// ExplorerPacker makes a sink for each device's explorer, in the order
// of Detail.Explorers; Packed are the sinks, finished.
type ExplorerPacker func() ExplorerSink
