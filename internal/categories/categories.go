package categories

import (
	"iter"
	"sort"

	"github.com/gpumem/gpumem/internal/addrmap"
	"github.com/gpumem/gpumem/pkg/trace"
)

// Category is what an allocation holds.
type Category uint8

// The categories, in the order reports list them; Unknown is last.
const (
	Parameter Category = iota
	Buffer
	Gradient
	OptimizerState
	Activation
	Temporary
	Input
	Workspace
	Unknown
	NumCategories
)

var names = [NumCategories]string{"parameter", "buffer", "gradient", "optimizer_state", "activation",
	"temporary", "input", "workspace", "unknown"}

// String is the category's name in JSON and budgets, such as
// "optimizer_state".
func (c Category) String() string {
	if c < NumCategories {
		return names[c]
	}
	return "unknown"
}

// Parse returns the category named s (its String, or a plural such as
// "activations"), and whether there is one.
func Parse(s string) (Category, bool) {
	for c, n := range names {
		if s == n || s == n+"s" || n == "optimizer_state" && s == "optimizer_states" {
			return Category(c), true
		}
	}
	return Unknown, false
}

// Phase is where in its iteration a block was born.
type Phase uint8

// The phases.
const (
	Setup Phase = iota
	Forward
	Backward
	Optimizer
	ZeroGrad
	After
)

var phaseNames = [...]string{"setup", "forward", "backward", "optimizer.step", "zero_grad", "after the last step"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "unknown"
}

// Block is one allocation of the trace. A big trace has millions, each
// kept until the trace is read: a block packs into 24 bytes (its size in
// 40 bits, its address not at all: Result.Lookup finds the blocks live
// before the trace by theirs).
type Block struct {
	// Born and Freed are positions: -1 for a block live before the trace
	// began; Freed is Result.Positions when the block is never freed. Like
	// Event they count in 32 bits.
	Born, Freed int32
	// Event is the index of its alloc event among the device's alloc and
	// free_completed events (replay.Plan's numbering); -1 if before the trace.
	Event int32
	Stack int32 // its alloc's stack, -1 if none
	// the size (Size): the low 32 bits of its 40, which count bytes, or
	// 512 B units when sizeHi's top bit is set
	sizeLo   uint32
	sizeHi   uint8
	Category Category
	Phase    Phase
	Rule     Rule // the rule that decided it (docs/categories.md)
}

// sizeUnits is the top bit of Block.sizeHi: its size counts 512 B units.
const sizeUnits = 0x80

// Size is the request rounded up as the caching allocator rounds it
// (512 B steps): a trace records requests, and a block can be larger
// still when the allocator did not split it (only a replay knows). It is
// exact below 512 GiB, and for multiples of 512 B below 256 TiB: far
// beyond any device (a larger size loses its low 9 bits, and past 256 TiB
// is kept as the largest below).
func (b *Block) Size() uint64 {
	v := uint64(b.sizeHi&^sizeUnits)<<32 | uint64(b.sizeLo)
	if b.sizeHi&sizeUnits != 0 {
		return v << 9
	}
	return v
}

// setSize sets the block's size (see Size).
func (b *Block) setSize(n uint64) {
	const limit = 1 << 39 // 40 bits less the units bit
	var hi uint8
	if n%512 == 0 || n >= limit {
		n, hi = min(n>>9, limit-1), sizeUnits
	}
	b.sizeLo, b.sizeHi = uint32(n), hi|uint8(n>>32)
}

// KeptPastStep reports whether b is an activation kept past the step
// after the one it was born in, as blocks of several iterations are: a
// leak, results held with their graphs across steps.
func (b *Block) KeptPastStep() bool {
	return b.Category == Activation && b.Rule == ruleOutlives
}

// Result is the classification of one device's trace.
type Result struct {
	Device    int
	Positions int // alloc and free_requested events

	// Peak is the first position after which allocated memory was
	// highest (-1: before the first event), PeakBytes that memory;
	// AtPeak is what each category held then (they sum to PeakBytes).
	Peak      int
	PeakBytes uint64
	AtPeak    [NumCategories]uint64

	Steps  int  // optimizer steps found
	Stacks bool // the trace recorded Python stacks for its events
	// Method says how the classification was decided, such as
	// "lifetimes and annotations" or "lifetimes, annotations and stacks".
	Method string

	// the blocks in the order they were born: those live before the
	// trace (head), then the trace's own (born), kept in the chunks the
	// Builder grew (a big trace's are not copied into one slice)
	head     []Block
	headAddr []uint64 // the address of each head block
	born     chunked[Block]
	before   map[uint64]int // address → index of the block live there before the trace (Lookup)
}

// NumBlocks is the number of blocks, the allocations of the trace and
// those live before it.
func (r *Result) NumBlocks() int { return len(r.head) + r.born.n }

// Block is block i (i < NumBlocks), in the order they were born (blocks
// live before the trace first).
func (r *Result) Block(i int) *Block {
	if i < len(r.head) {
		return &r.head[i]
	}
	return r.born.at(i - len(r.head))
}

// All yields each block with its index, in the order they were born.
func (r *Result) All() iter.Seq2[int, *Block] {
	return func(yield func(int, *Block) bool) {
		for i := range r.head {
			if !yield(i, &r.head[i]) {
				return
			}
		}
		i := len(r.head)
		for _, ch := range r.born.chunks {
			for k := range ch {
				if !yield(i, &ch[k]) {
					return
				}
				i++
			}
		}
	}
}

// Live returns the blocks live after position p.
func (r *Result) Live(p int) []*Block {
	var out []*Block
	for _, b := range r.All() {
		if int(b.Born) <= p && int(b.Freed) > p {
			out = append(out, b)
		}
	}
	return out
}

// ByEvent returns the block whose alloc is event e (replay.Plan's
// Event numbering), or nil.
func (r *Result) ByEvent(e int32) *Block {
	n := r.NumBlocks()
	i := sort.Search(n, func(i int) bool { return r.Block(i).Event >= e })
	if i < n && r.Block(i).Event == e {
		return r.Block(i)
	}
	return nil
}

// InOrder returns ByEvent for callers that ask for events in increasing
// order, as a plan's allocations come: it steps through the blocks
// instead of searching them each time (it searches when asked out of
// order).
func (r *Result) InOrder() func(e int32) *Block {
	next := 0
	return func(e int32) *Block {
		n := r.NumBlocks()
		if next > 0 && r.Block(next-1).Event >= e {
			return r.ByEvent(e)
		}
		for next < n && r.Block(next).Event < e {
			next++
		}
		if next < n && r.Block(next).Event == e {
			next++
			return r.Block(next - 1)
		}
		return nil
	}
}

// Classify classifies the allocations of snap's trace of device.
func Classify(snap *trace.Snapshot, device int) *Result {
	b := NewBuilder()
	if device >= 0 && device < len(snap.Traces) {
		for i := range snap.Traces[device] {
			b.Add(&snap.Traces[device][i])
		}
	}
	return b.Result(snap, device)
}

// Builder gathers one device's events as they are read.
type Builder struct {
	blocks chunked[Block]
	open   addrmap.Map[int] // address → index into blocks of the live block there
	times  clock            // time of each position
	stacks bool
	events int32    // alloc and free_completed events so far
	pre    []Block  // blocks freed before the trace saw them allocated
	preAt  []uint64 // the address of each
	// the allocated memory of the blocks the trace saw born, after each
	// position: now, its highest and the first position it was reached
	// (-1: none above 0), which is the peak when no block came before the
	// trace but those live at its end (Result.peak)
	cur, best int64
	bestAt    int
}

// chunked is an append-only list of a Builder: past its first chunkLen
// elements it grows a chunk at a time, so that a big trace's millions of
// blocks are never copied, as one slice's are at each growth (by 1.25x
// past a few hundred elements: each time a copy and fresh pages); the
// Result keeps the chunks. A small trace's list stays one small slice.
type chunked[T any] struct {
	chunks [][]T
	n      int
}

const chunkBits = 16 // chunkLen = 1 << chunkBits elements

func (c *chunked[T]) add(v T) {
	k := len(c.chunks) - 1
	if k < 0 || len(c.chunks[k]) == 1<<chunkBits {
		c.chunks = append(c.chunks, make([]T, 0, min(1<<chunkBits, max(c.n, 64))))
		k++
	}
	c.chunks[k] = append(c.chunks[k], v)
	c.n++
}

// at is element i (i < n).
func (c *chunked[T]) at(i int) *T { return &c.chunks[i>>chunkBits][i&(1<<chunkBits-1)] }

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder { return &Builder{bestAt: -1} }

// Add takes the device's next event.
func (b *Builder) Add(e *trace.Event) {
	switch e.Action {
	case trace.ActionAlloc:
		pos := b.times.n
		b.times.add(e.TimeUS)
		if i, ok := b.open.Get(e.Addr); ok { // a second alloc at a live address: the first ended
			old := b.blocks.at(i)
			old.Freed = int32(pos)
			b.cur -= int64(old.Size())
		}
		b.open.Set(e.Addr, b.blocks.n)
		blk := Block{Born: int32(pos), Freed: -2, Event: b.events, Stack: e.Stack}
		blk.setSize(rounded(e.Size))
		b.blocks.add(blk)
		if b.cur += int64(blk.Size()); b.cur > b.best {
			b.best, b.bestAt = b.cur, pos
		}
		b.stacks = b.stacks || e.Stack >= 0
		b.events++
	case trace.ActionFreeRequested:
		pos := b.times.n
		b.times.add(e.TimeUS)
		if i, ok := b.open.Get(e.Addr); ok {
			blk := b.blocks.at(i)
			blk.Freed = int32(pos)
			b.cur -= int64(blk.Size())
			b.open.Delete(e.Addr)
		} else {
			blk := Block{Born: -1, Freed: int32(pos), Event: -1, Stack: -1}
			blk.setSize(rounded(e.Size))
			b.pre, b.preAt = append(b.pre, blk), append(b.preAt, e.Addr)
		}
	case trace.ActionFreeCompleted:
		b.events++
	}
}

// Result classifies what the builder was given; snap gives the
// annotations, stacks and final segments (its traces are not read). The
// builder's blocks and times move into the result: it takes no more
// events after it.
func (b *Builder) Result(snap *trace.Snapshot, device int) *Result {
	n := b.times.n
	r := &Result{Device: device, Positions: n, Stacks: b.stacks && len(snap.Stacks) > 0}
	// blocks live at the end that the trace never saw allocated
	var alive []Block
	var aliveAt []uint64
	for si := range snap.Segments {
		s := &snap.Segments[si]
		if s.Device != device {
			continue
		}
		for _, blk := range s.Blocks {
			if blk.State != trace.BlockAllocated {
				continue
			}
			if _, ok := b.open.Get(blk.Address); !ok {
				a := Block{Born: -1, Freed: int32(n), Event: -1, Stack: blk.Stack}
				a.setSize(blk.Size)
				alive, aliveAt = append(alive, a), append(aliveAt, blk.Address)
			}
		}
	}
	// with no block freed before the trace saw it, the peak is the
	// builder's, over the blocks live at the end
	streamed := len(b.pre) == 0
	var base int64
	for _, blk := range alive {
		base += int64(blk.Size())
	}
	r.head, r.headAddr = append(b.pre, alive...), append(b.preAt, aliveAt...)
	r.born, b.blocks = b.blocks, chunked[Block]{}
	for _, blk := range r.All() {
		if blk.Freed == -2 {
			blk.Freed = int32(n)
		}
	}
	classify(r, snap, &b.times)
	b.times = clock{}
	if streamed {
		r.setPeak(b.bestAt, base+b.best)
	} else {
		r.peak()
	}
	return r
}

// peak finds the peak of allocated memory and what each category held.
func (r *Result) peak() {
	delta := make([]int64, r.Positions+1)
	var cur int64
	for _, b := range r.All() {
		if b.Born < 0 {
			cur += int64(b.Size())
		} else {
			delta[b.Born] += int64(b.Size())
		}
		if int(b.Freed) < r.Positions {
			delta[b.Freed] -= int64(b.Size())
		}
	}
	best, at := cur, -1
	for p := 0; p < r.Positions; p++ {
		cur += delta[p]
		if cur > best {
			best, at = cur, p
		}
	}
	r.setPeak(at, best)
}

// setPeak sets the peak, after position at (-1: before the first event),
// of best bytes, and what each category held then.
func (r *Result) setPeak(at int, best int64) {
	r.Peak, r.PeakBytes = at, uint64(max(best, 0))
	for _, b := range r.Live(at) {
		r.AtPeak[b.Category] += b.Size()
	}
}

// rounded is a request's size as the caching allocator rounds it.
func rounded(n uint64) uint64 {
	const step = 512
	if n < step {
		return step
	}
	if n > ^uint64(0)-step {
		return n
	}
	return (n + step - 1) / step * step
}

// Lookup returns the block whose alloc is event e (replay.Plan's
// numbering) or, for e < 0, the block live before the trace at addr;
// nil when there is none.
func (r *Result) Lookup(e int32, addr uint64) *Block {
	if e >= 0 {
		return r.ByEvent(e)
	}
	if r.before == nil {
		r.before = map[uint64]int{}
		for i := range r.head { // the blocks live before the trace
			r.before[r.headAddr[i]] = i
		}
	}
	if i, ok := r.before[addr]; ok {
		return &r.head[i]
	}
	return nil
}
