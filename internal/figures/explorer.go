package figures

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
