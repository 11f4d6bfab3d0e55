package categories

import (
	"iter"
	"math"
	"slices"
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

// Block is one allocation of the trace, as Result.Block gives it: a copy
// (a big trace has millions, which the Result keeps packed: see rec).
type Block struct {
	// Born and Freed are positions: -1 for a block live before the trace
	// began; Freed is Result.Positions when the block is never freed.
	// They count in 32 bits.
	Born, Freed int32
	Category    Category
	Phase       Phase
	Rule        Rule   // the rule that decided it (docs/categories.md)
	size        uint64 // see Size
}

// Size is the request rounded up as the caching allocator rounds it
// (512 B steps): a trace records requests, and a block can be larger
// still when the allocator did not split it (only a replay knows). It is
// exact below 512 GiB, and for multiples of 512 B below 256 TiB: far
// beyond any device (a larger size loses its low 9 bits, and past 256 TiB
// is kept as the largest below).
func (b *Block) Size() uint64 { return b.size }

// keptSize is size n as a Block keeps it (see Size).
func keptSize(n uint64) uint64 {
	const limit = 1 << 39 // 40 bits less the units bit
	if n%512 == 0 || n >= limit {
		return min(n>>9, limit-1) << 9
	}
	return n
}

// A classified block's category, phase and rule pack into a uint16, of
// 13 bits (classes indexes them): the rules must stay below 32.
const _ = uint(1<<13 - 1 - (uint(len(ruleNames)-1)<<8 | 0xff))

func packCls(c Category, p Phase, rule Rule) uint16 {
	return uint16(c) | uint16(p)<<4 | uint16(rule)<<8
}

func unpackCls(v uint16) (Category, Phase, Rule) {
	return Category(v & 0xf), Phase(v >> 4 & 0xf), Rule(v >> 8)
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

	Steps  int  // optimizer steps found
	Stacks bool // the trace recorded Python stacks for its events
	// Method says how the classification was decided, such as
	// "lifetimes and annotations" or "lifetimes, annotations and stacks".
	Method string

	// the blocks in the order they were born: those live before the
	// trace (head), then the trace's own (born), kept in the chunks the
	// Builder grew (a big trace's are not copied into one slice)
	head      []Block
	headAddr  []uint64 // the address of each head block
	headStack []int32  // and its stack (its event is -1)
	born      blockList
	cls       classes // each born block's category, phase and rule
	side      side
	before    map[uint64]int // address → index of the block live there before the trace (Lookup)
}

// side is what the born blocks keep beside them, by index: their alloc's
// event and stack, in a few bytes, per chunk of 1<<chunkBits blocks. An
// event is kept as its block's Born less it: the free_requested events
// whose free_completed has not come yet (so a few), in the fewest bytes
// (1, 2 or 4) that hold every one of its chunk. A chunk keeps no stacks
// while each was -1 (a trace that records none).
type side struct {
	ev     []evChunk
	stacks [][]int32 // per chunk: nil or each block's stack
	// tail is the last chunk while add may append a byte to it as is: a
	// chunk of bytes and no stacks; room is how long it may grow so (0:
	// not at all), within its capacity and its chunkLen values
	tail *evChunk
	room int
}

// evChunk holds a chunk's Born less event, each in w bytes (little
// endian, two's complement).
type evChunk struct {
	w uint8
	b []byte
}

// addByte keeps the next block's event and stack in their common case,
// small enough to inline: a block of no stack whose Born less event fits
// a byte, in the last chunk while it is one of bytes and no stacks. It
// says whether it took the block; addAny takes the rest.
func (s *side) addByte(born, event, stack int32) bool {
	d := born - event // both count from 0 up to 2^31-1: no overflow
	if ch := s.tail; ch != nil && len(ch.b) < s.room && uint32(d+128) < 256 && stack == -1 {
		ch.b = append(ch.b, byte(d))
		return true
	}
	return false
}

// addAny keeps block i's event and stack (i is the number of blocks so
// far), whose Born less event is d.
func (s *side) addAny(i int, d, stack int32) {
	k := i >> chunkBits
	if k == len(s.ev) {
		s.ev = append(s.ev, evChunk{w: 1, b: make([]byte, 0, min(1<<chunkBits, max(i, 64)))})
		s.stacks = append(s.stacks, nil)
	}
	ch := &s.ev[k]
	switch w := ch.w; {
	case w == 1 && d >= math.MinInt8 && d <= math.MaxInt8:
		ch.b = append(ch.b, byte(d))
	case w <= 2 && d >= math.MinInt16 && d <= math.MaxInt16:
		if w == 1 {
			ch.widen(2)
		}
		ch.b = append(ch.b, byte(d), byte(d>>8))
	default:
		if w < 4 {
			ch.widen(4)
		}
		ch.b = append(ch.b, byte(d), byte(d>>8), byte(d>>16), byte(d>>24))
	}
	switch {
	case s.stacks[k] != nil:
		s.stacks[k] = append(s.stacks[k], stack)
	case stack != -1: // the chunk's first stack: the ones before it had none
		j := i & (1<<chunkBits - 1)
		st := make([]int32, j, min(1<<chunkBits, max(j+1, 64)))
		for n := range st {
			st[n] = -1
		}
		s.stacks[k] = append(st, stack)
	}
	s.tail, s.room = ch, 0
	if ch.w == 1 && s.stacks[k] == nil {
		s.room = min(cap(ch.b), 1<<chunkBits)
	}
}

// at is the chunk's j-th value.
func (ch *evChunk) at(j int) int32 {
	switch ch.w {
	case 1:
		return int32(int8(ch.b[j]))
	case 2:
		return int32(int16(uint16(ch.b[2*j]) | uint16(ch.b[2*j+1])<<8))
	}
	return int32(uint32(ch.b[4*j]) | uint32(ch.b[4*j+1])<<8 | uint32(ch.b[4*j+2])<<16 | uint32(ch.b[4*j+3])<<24)
}

// widen turns the chunk's values w bytes each.
func (ch *evChunk) widen(w uint8) {
	n := len(ch.b) / int(ch.w)
	wide := evChunk{w: w, b: make([]byte, 0, int(w)*max(n+1, cap(ch.b)/int(ch.w)))}
	for j := range n {
		d := ch.at(j)
		if wide.b = append(wide.b, byte(d), byte(d>>8)); w == 4 {
			wide.b = append(wide.b, byte(d>>16), byte(d>>24))
		}
	}
	*ch = wide
}

// event is the event of born block i, born at born.
func (s *side) event(i int, born int32) int32 {
	return born - s.ev[i>>chunkBits].at(i&(1<<chunkBits-1))
}

// stack is the stack of born block i.
func (s *side) stack(i int) int32 {
	if ch := s.stacks[i>>chunkBits]; ch != nil {
		return ch[i&(1<<chunkBits-1)]
	}
	return -1
}

// Event is the index of block i's alloc event among the device's alloc
// and free_completed events (replay.Plan's numbering); -1 for a block
// live before the trace.
func (r *Result) Event(i int) int32 {
	if i < len(r.head) {
		return -1
	}
	i -= len(r.head)
	return r.side.event(i, r.born.born(i))
}

// bornAt is block i's Born.
func (r *Result) bornAt(i int) int32 {
	if i < len(r.head) {
		return r.head[i].Born
	}
	return r.born.born(i - len(r.head))
}

// Stack is block i's alloc's stack, -1 if none.
func (r *Result) Stack(i int) int32 {
	if i < len(r.head) {
		return r.headStack[i]
	}
	return r.side.stack(i - len(r.head))
}

// NumBlocks is the number of blocks, the allocations of the trace and
// those live before it.
func (r *Result) NumBlocks() int { return len(r.head) + r.born.recs.n }

// Block is block i (i < NumBlocks), in the order they were born (blocks
// live before the trace first).
func (r *Result) Block(i int) Block {
	if i < len(r.head) {
		return r.head[i]
	}
	i -= len(r.head)
	b := r.born.block(i, r.born.recs.at(i), int32(r.Positions))
	if i < r.born.recs.n {
		b.Category, b.Phase, b.Rule = unpackCls(r.cls.get(i))
	}
	return b
}

// set classifies block i.
func (r *Result) set(i int, c Category, p Phase, rule Rule) {
	if i < len(r.head) {
		b := &r.head[i]
		b.Category, b.Phase, b.Rule = c, p, rule
		return
	}
	r.cls.set(i-len(r.head), packCls(c, p, rule))
}

// setFrom classifies every block from block i, one born in the trace,
// alike.
func (r *Result) setFrom(i int, c Category, p Phase, rule Rule) {
	r.cls.setFrom(i-len(r.head), packCls(c, p, rule))
}

// setCategory sets block i's category and rule, keeping its phase.
func (r *Result) setCategory(i int, c Category, rule Rule) {
	var p Phase
	if i < len(r.head) {
		p = r.head[i].Phase
	} else {
		_, p, _ = unpackCls(r.cls.get(i - len(r.head)))
	}
	r.set(i, c, p, rule)
}

// All yields each block with its index, in the order they were born.
// The Block is the iteration's own: it holds the next block once the
// loop goes on (keep a copy, or the index, to hold on to one).
func (r *Result) All() iter.Seq2[int, *Block] {
	return func(yield func(int, *Block) bool) {
		var b Block
		for i := range r.head {
			if b = r.head[i]; !yield(i, &b) {
				return
			}
		}
		i, k, end := len(r.head), 0, int32(r.Positions)
		for _, ch := range r.born.recs.chunks {
			for j := range ch {
				r.born.fill(&b, k, &ch[j], end)
				b.Category, b.Phase, b.Rule = 0, 0, 0
				if k < r.born.recs.n {
					b.Category, b.Phase, b.Rule = unpackCls(r.cls.get(k))
				}
				if !yield(i, &b) {
					return
				}
				i, k = i+1, k+1
			}
		}
	}
}

// ByEvent returns the block whose alloc is event e (replay.Plan's
// Event numbering), and whether there is one.
func (r *Result) ByEvent(e int32) (Block, bool) {
	if i := r.byEvent(e); i >= 0 {
		return r.Block(i), true
	}
	return Block{}, false
}

// byEvent is the index of the block whose alloc is event e, or -1.
func (r *Result) byEvent(e int32) int {
	n := r.NumBlocks()
	i := sort.Search(n, func(i int) bool { return r.Event(i) >= e })
	if i < n && r.Event(i) == e {
		return i
	}
	return -1
}

// InOrder returns the category of ByEvent's block for callers that ask
// for events in increasing order, as a plan's allocations come: it steps
// through the blocks instead of searching them each time (it searches
// when asked out of order).
func (r *Result) InOrder() func(e int32) (Category, bool) {
	c := &inOrder{r: r, g: -1}
	return c.category
}

// inOrder is InOrder's cursor: next is the first block not stepped
// past, last the event of block next-1; recs and ev are the chunk g of
// the born blocks' records and events (-1: none yet).
type inOrder struct {
	r    *Result
	next int
	last int32
	g    int
	recs []rec
	ev   *evChunk
}

func (c *inOrder) category(e int32) (Category, bool) {
	r := c.r
	if c.next > 0 && c.last >= e {
		if i := r.byEvent(e); i >= 0 {
			return r.category(i), true
		}
		return Unknown, false
	}
	for h := len(r.head); c.next < h; { // blocks live before the trace: event -1
		ev := r.Event(c.next)
		if ev > e {
			return Unknown, false
		}
		c.next, c.last = c.next+1, ev
		if ev == e {
			return r.category(c.next - 1), true
		}
	}
	// the blocks born in the trace, a chunk at a time
	for k := c.next - len(r.head); k < r.born.recs.n; k++ {
		j := k & (1<<chunkBits - 1)
		if g := k >> chunkBits; g != c.g {
			c.g, c.recs, c.ev = g, r.born.recs.chunks[g], &r.side.ev[g]
		}
		ev := r.born.bornOf(k, &c.recs[j]) - c.ev.at(j)
		if ev > e {
			c.next = len(r.head) + k
			return Unknown, false
		}
		c.last = ev
		if ev == e {
			c.next = len(r.head) + k + 1
			return r.BornCategory(k), true
		}
	}
	c.next = r.NumBlocks()
	return Unknown, false
}

// Born is the number of blocks born in the trace: one per alloc event,
// in the order of those events.
func (r *Result) Born() int { return r.born.recs.n }

// BornCategory is the category of the k-th block born in the trace (k <
// Born), the block of its k-th alloc event: a caller that passes over a
// plan whose allocations are the trace's alloc events, one for one, in
// order, finds each one's category without looking its event up.
func (r *Result) BornCategory(k int) Category { return Category(r.cls.get(k) & 0xf) }

// category is block i's category.
func (r *Result) category(i int) Category {
	if i < len(r.head) {
		return r.head[i].Category
	}
	return r.BornCategory(i - len(r.head))
}

// Classify classifies the allocations of snap's trace of device.
func Classify(snap *trace.Snapshot, device int) *Result {
	b := NewBuilder()
	if device >= 0 && device < len(snap.Traces) {
		b.Add(snap.Traces[device])
	}
	return b.Result(snap, device)
}

// Builder gathers one device's events as they are read.
type Builder struct {
	blocks blockList
	side   side // the blocks' events and stacks
	// open maps an address to 1 + the index into blocks of the live block
	// there, 0 once it is freed: an address stays, as a program reuses
	// the few its allocator hands out, and a free writes a value instead
	// of taking the key out of the table
	open addrmap.Map[int]
	// ended holds, once EndOpen gave them, the addresses of the blocks
	// open at the end, in order: a builder fed by AddOpen keeps no table
	ended  []uint64
	given  bool  // fed by AddOpen: open is empty, ended holds the end
	times  clock // time of each position
	stacks bool
	events int32    // alloc and free_completed events so far
	pre    []Block  // blocks freed before the trace saw them allocated
	preAt  []uint64 // the address of each
}

// chunked is the append-only list of a Builder's blocks: past its first
// chunkLen elements it grows a chunk at a time, so that a big trace's millions of
// blocks are never copied, as one slice's are at each growth (by 1.25x
// past a few hundred elements: each time a copy and fresh pages); the
// Result keeps the chunks. A small trace's list stays one small slice.
type chunked struct {
	chunks [][]rec
	n      int
}

const chunkBits = 16 // chunkLen = 1 << chunkBits elements

// grow adds v in a new chunk, or in the first one doubled: the append
// when the last chunk is full (blockList.add appends to it in place
// while it has room, so that only its length is stored).
func (c *chunked) grow(v rec) {
	k := len(c.chunks) - 1
	if k < 0 || len(c.chunks[k]) == 1<<chunkBits {
		c.chunks = append(c.chunks, make([]rec, 0, min(1<<chunkBits, max(c.n, 64))))
		k++
	} else { // the first chunk, doubled (append grows by 1.25x)
		ch := c.chunks[k]
		c.chunks[k] = append(make([]rec, 0, min(1<<chunkBits, 2*cap(ch))), ch...)
	}
	c.chunks[k] = append(c.chunks[k], v)
	c.n++
}

// at is element i (i < n).
func (c *chunked) at(i int) *rec { return &c.chunks[i>>chunkBits][i&(1<<chunkBits-1)] }

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder { return &Builder{} }

// Add takes the device's next events.
func (b *Builder) Add(events []trace.Event) { b.add(events, nil) }

// AddOpen is Add for events whose open blocks a planner looked up as it
// planned them: open[k] is, for an alloc or free_requested event, 1 +
// the index of the block open at the event's address before it (the
// last alloc there, with no free_requested of the address since), 0 when
// none is. Its builder takes its events from AddOpen only, and the
// addresses open at the end from EndOpen.
func (b *Builder) AddOpen(events []trace.Event, open []int32) {
	b.given = true
	b.add(events, open[:len(events)])
}

// EndOpen gives a builder fed by AddOpen the addresses of the blocks
// open at the end of its events, in order.
func (b *Builder) EndOpen(addrs []uint64) { b.ended = addrs }

// add is Add, with the open blocks looked up in the builder's table
// when open is nil.
func (b *Builder) add(events []trace.Event, open []int32) {
	// the common cases of clock.add, blockList.setFreed and add and of
	// keeping a block's event inline here, and the rest out of line: a
	// big trace's millions of events pay for each call
	for k := range events {
		e := &events[k]
		switch e.Action {
		case trace.ActionAlloc:
			pos := int32(b.times.n)
			b.times.add(e.TimeUS)
			var was int
			if open != nil {
				was = int(open[k])
			} else {
				o, _ := b.open.Put(e.Addr)
				was, *o = *o, b.blocks.recs.n+1
			}
			if was > 0 && !b.blocks.setLife(was-1, pos) { // a second alloc at a live address: the first ended
				b.blocks.setFreed(was-1, pos)
			}
			if !b.side.addByte(pos, b.events, e.Stack) {
				b.side.addAny(b.blocks.recs.n, pos-b.events, e.Stack)
			}
			if n := rounded(e.Size); !b.blocks.addNear(pos, n) {
				b.blocks.add(pos, n)
			}
			// (no running total of memory: the peak is the replay's)
			if e.Stack >= 0 {
				b.stacks = true
			}
			b.events++
		case trace.ActionFreeRequested:
			pos := int32(b.times.n)
			b.times.add(e.TimeUS)
			var was int
			if open != nil {
				was = int(open[k])
			} else if o := b.open.Ref(e.Addr); o != nil {
				was, *o = *o, 0
			}
			if was > 0 {
				if !b.blocks.setLife(was-1, pos) {
					b.blocks.setFreed(was-1, pos)
				}
			} else { // live from before the trace to here
				blk := Block{Born: -1, Freed: pos, size: keptSize(rounded(e.Size))}
				b.pre, b.preAt = append(b.pre, blk), append(b.preAt, e.Addr)
			}
		case trace.ActionFreeCompleted:
			b.events++
		}
	}
}

// isOpen says a block is open at addr at the end of the events.
func (b *Builder) isOpen(addr uint64) bool {
	if b.given {
		_, ok := slices.BinarySearch(b.ended, addr)
		return ok
	}
	o, _ := b.open.Get(addr)
	return o > 0
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
	var aliveStack []int32
	for si := range snap.Segments {
		s := &snap.Segments[si]
		if s.Device != device {
			continue
		}
		for _, blk := range s.Blocks {
			if blk.State != trace.BlockAllocated {
				continue
			}
			if !b.isOpen(blk.Address) {
				a := Block{Born: -1, Freed: int32(n), size: keptSize(blk.Size)}
				alive, aliveAt = append(alive, a), append(aliveAt, blk.Address)
				aliveStack = append(aliveStack, blk.Stack)
			}
		}
	}
	r.head, r.headAddr = append(b.pre, alive...), append(b.preAt, aliveAt...)
	r.headStack = make([]int32, len(b.pre), len(r.head))
	for i := range b.pre {
		r.headStack[i] = -1
	}
	r.headStack = append(r.headStack, aliveStack...)
	r.born, b.blocks = b.blocks, blockList{}
	r.born.done()
	r.side, b.side = b.side, side{}
	r.cls = newClasses(r.born.recs.n)
	classify(r, snap, &b.times)
	b.times = clock{}
	return r
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
// numbering) or, for e < 0, the block live before the trace at addr, and
// whether there is one.
func (r *Result) Lookup(e int32, addr uint64) (Block, bool) {
	if i := r.Find(e, addr); i >= 0 {
		return r.Block(i), true
	}
	return Block{}, false
}

// Find is the index of the block Lookup returns, or -1.
func (r *Result) Find(e int32, addr uint64) int {
	if e >= 0 {
		return r.byEvent(e)
	}
	if r.before == nil {
		r.before = map[uint64]int{}
		for i := range r.head { // the blocks live before the trace
			r.before[r.headAddr[i]] = i
		}
	}
	if i, ok := r.before[addr]; ok {
		return i
	}
	return -1
}
