package replay

import (
	"context"
	"math"
	"sync"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// opLog holds a plan's operations, with each one's Event and Stack, packed
// into a few bytes each (a free takes 2 or 3, an allocation 3 or 4 when
// its size is one of the recent ones, instead of the 56 of an Op and its
// two indexes): a streamed plan of a big trace keeps its operations here
// until the replay reads them back. The format is gm_alloc.h's ("The
// packed op log"), which alloc.Unpacker reads: put and the constants
// below must keep to it.
type opLog struct {
	// chunks hold the packed ops; the last is cur, where put writes, its
	// first at bytes in use (bytes(k) is chunk k's ops)
	chunks [][]byte
	cur    []byte
	at     int
	n      int   // operations
	allocs int   // of them allocations (OpAlloc)
	event  int32 // the last operation's Event and Stack
	stack  int32
	sizes  sizeCache
}

// sizeCache holds recent allocation sizes: an OpAlloc's size is written
// as its slot in the cache when the cache holds it (one byte: a program
// allocates the same few sizes again and again), else as the size plus
// sizeSlots, and then takes its slot. The writer and each reader keep
// their own cache and fill it alike, in the log's order.
type sizeCache [sizeSlots]uint64

const sizeSlots = 128 // a slot is one uvarint byte

// slot is the slot of size n: the top bits of a Fibonacci hash.
func (*sizeCache) slot(n uint64) uint64 { return n * 0x9E3779B97F4A7C15 >> 57 }

// A log's chunks grow from firstChunk to logChunk bytes: a small trace
// (one of thousands of ranks) costs a few kilobytes, not a megabyte.
const (
	firstChunk = 4 << 10
	logChunk   = 1 << 20
)

// maxOpLen is more than the longest packed op: a header and an extra
// byte, the ID, Stack, Pool and Event as uvarints of 32 bits (5 bytes
// each), Size, Stream and Hint as uvarints of 64 bits (10 bytes each),
// and Flags.
const maxOpLen = 64

// Header byte of a packed op: its kind, then flags saying which fields
// follow and how its Event and Stack relate to the previous op's.
const (
	hKind      = 0x0f
	hEventNext = 1 << 4 // Event is the previous op's + 1 (else the same, or see xEvent)
	hStackSame = 1 << 5 // Stack is the previous op's
	hStackNew  = 1 << 6 // Stack follows as a uvarint (else -1, or hStackSame)
	hExtra     = 1 << 7 // a byte of x* flags follows
)

// Fields an op has beside its ID, flagged in the extra byte.
const (
	xSize = 1 << iota
	xStream
	xHint
	xPool
	xFlags
	xEvent // Event follows as a uvarint, less the previous op's
)

// An OpAlloc's size always follows (not flagged by xSize), as a slot of
// the sizeCache or as the size plus sizeSlots; a size too large for that
// sum (2^64 less sizeSlots or more) is flagged by xSize and follows as it is.

// put packs op, with its Event and Stack, at the end of the log: the
// builder of a streamed plan writes each op here as it plans it, so that
// the plan's operations are never held unpacked.
func (l *opLog) put(op *alloc.Op, event, stack int32) {
	if len(l.cur)-l.at < maxOpLen {
		l.grow()
	}
	b, p := l.cur, l.at
	l.n++
	h, x := l.header(op.Kind, event, stack)
	if op.Kind == alloc.OpAlloc {
		l.allocs++
		if op.Size > math.MaxUint64-sizeSlots {
			x |= xSize
		}
	} else if op.Size != 0 {
		x |= xSize
	}
	if op.Stream|op.Hint|uint64(op.Pool)|uint64(op.Flags) != 0 { // rare: one test for all
		if op.Stream != 0 {
			x |= xStream
		}
		if op.Hint != 0 {
			x |= xHint
		}
		if op.Pool != 0 {
			x |= xPool
		}
		if op.Flags != 0 {
			x |= xFlags
		}
	}
	p = putHead(b, p, h, x, op.ID, stack)
	if x&xSize != 0 {
		p = putUvarint(b, p, op.Size)
	} else if op.Kind == alloc.OpAlloc {
		if k := l.sizes.slot(op.Size); l.sizes[k] == op.Size {
			b[p] = byte(k)
			p++
		} else {
			p = putUvarint(b, p, op.Size+sizeSlots)
			l.sizes[k] = op.Size
		}
	}
	if x != 0 {
		if x&xStream != 0 {
			p = putUvarint(b, p, op.Stream)
		}
		if x&xHint != 0 {
			p = putUvarint(b, p, op.Hint)
		}
		if x&xPool != 0 {
			p = putUvarint(b, p, uint64(op.Pool))
		}
		if x&xFlags != 0 {
			b[p] = op.Flags
			p++
		}
		if x&xEvent != 0 {
			p = putUvarint(b, p, uint64(uint32(event-l.event)))
		}
	}
	l.event, l.stack = event, stack
	l.at = p
}

// header is the header byte of an op of kind at event with stack, as it
// follows the op put before, and the extra byte's xEvent when the event
// does not follow that op's (the extra byte's other bits are the
// caller's).
func (l *opLog) header(kind alloc.OpKind, event, stack int32) (h, x byte) {
	h = byte(kind) & hKind
	switch d := event - l.event; {
	case d == 1:
		h |= hEventNext
	case d != 0:
		x = xEvent
	}
	switch {
	case stack == l.stack && stack >= 0:
		h |= hStackSame
	case stack >= 0:
		h |= hStackNew
	}
	return h, x
}

// putHead writes an op's start at b[p:]: its header h (marked hExtra
// when the extra byte x is not 0), x, the ID, and the stack when h says
// it is new. It returns where the op's next field goes.
func putHead(b []byte, p int, h, x byte, id uint32, stack int32) int {
	if x != 0 {
		b[p] = h | hExtra
		b[p+1] = x
		p += 2
	} else {
		b[p] = h
		p++
	}
	p = putUvarint(b, p, uint64(id))
	if h&hStackNew != 0 {
		p = putUvarint(b, p, uint64(stack))
	}
	return p
}

// putFree is put of an OpFree of id, the usual free, which has no field
// but its ID: the op is not built, nor its other fields tested.
func (l *opLog) putFree(id uint32, event, stack int32) {
	if len(l.cur)-l.at < maxOpLen {
		l.grow()
	}
	b, p := l.cur, l.at
	l.n++
	if event-l.event == 1 && (stack < 0 || stack == l.stack) {
		// the usual free, the next event's, of no stack or the same: a
		// header and the ID, as the general case below writes them
		h := byte(alloc.OpFree) | hEventNext
		if stack >= 0 {
			h |= hStackSame
		}
		b[p] = h
		l.event, l.stack, l.at = event, stack, putUvarint(b, p+1, uint64(id))
		return
	}
	h, x := l.header(alloc.OpFree, event, stack)
	p = putHead(b, p, h, x, id, stack)
	if x != 0 {
		p = putUvarint(b, p, uint64(uint32(event-l.event)))
	}
	l.event, l.stack = event, stack
	l.at = p
}

// putAlloc is put of an OpAlloc of id and size with no other field, the
// usual allocation: the op is not built, nor its other fields tested.
func (l *opLog) putAlloc(id uint32, size uint64, event, stack int32) {
	if len(l.cur)-l.at < maxOpLen {
		l.grow()
	}
	b, p := l.cur, l.at
	l.n++
	l.allocs++
	if k := l.sizes.slot(size); event-l.event == 1 && (stack < 0 || stack == l.stack) && l.sizes[k] == size {
		// the usual allocation, as putFree's usual free, of a size in
		// the cache (so not one too large for it): the general case's
		// header, ID and slot
		h := byte(alloc.OpAlloc) | hEventNext
		if stack >= 0 {
			h |= hStackSame
		}
		b[p] = h
		p = putUvarint(b, p+1, uint64(id))
		b[p] = byte(k)
		l.event, l.stack, l.at = event, stack, p+1
		return
	}
	h, x := l.header(alloc.OpAlloc, event, stack)
	if size > math.MaxUint64-sizeSlots {
		x |= xSize
	}
	p = putHead(b, p, h, x, id, stack)
	switch k := l.sizes.slot(size); {
	case x&xSize != 0:
		p = putUvarint(b, p, size)
	case l.sizes[k] == size:
		b[p] = byte(k)
		p++
	default:
		p = putUvarint(b, p, size+sizeSlots)
		l.sizes[k] = size
	}
	if x&xEvent != 0 {
		p = putUvarint(b, p, uint64(uint32(event-l.event)))
	}
	l.event, l.stack = event, stack
	l.at = p
}

// grow ends the chunk put writes in and starts a new one, twice its
// size up to logChunk.
func (l *opLog) grow() {
	size := firstChunk
	if k := len(l.chunks) - 1; k >= 0 {
		l.chunks[k] = l.cur[:l.at]
		size = min(2*len(l.cur), logChunk)
	}
	l.cur, l.at = make([]byte, size), 0
	l.chunks = append(l.chunks, l.cur)
}

// bytes is the packed ops of chunk k.
func (l *opLog) bytes(k int) []byte {
	if k == len(l.chunks)-1 {
		return l.cur[:l.at]
	}
	return l.chunks[k]
}

// putUvarint writes v as a uvarint at b[p:] and returns the index after
// it; unlike binary.PutUvarint it is inlined.
func putUvarint(b []byte, p int, v uint64) int {
	for v >= 0x80 {
		b[p] = byte(v) | 0x80
		v >>= 7
		p++
	}
	b[p] = byte(v)
	return p + 1
}

// opBatch is the slices each unpacks a big log's operations into.
type opBatch struct {
	ops          []alloc.Op
	event, stack []int32
}

// batches keeps the slices of the passes over big logs done with: a
// replay may read its log several times (the replay, its placement
// check, the HTML explorer's), and each pass's slices would otherwise be
// garbage the heap grows by until the next collection. They hold runBatch
// operations, as run's: Batch's (3 MB) were a large part of what a
// replay holds after its read.
var batches = sync.Pool{New: func() any {
	return &opBatch{make([]alloc.Op, 0, runBatch), make([]int32, 0, runBatch), make([]int32, 0, runBatch)}
}}

// each hands f the operations in order, up to runBatch at a time, in
// slices it reuses; it stops at f's first error.
func (l *opLog) each(f func(ops []alloc.Op, event, stack []int32) error) error {
	if l.n >= runBatch {
		b := batches.Get().(*opBatch)
		defer batches.Put(b)
		return l.into(b.ops[:0], b.event[:0], b.stack[:0], f)
	}
	return l.into(make([]alloc.Op, 0, l.n), make([]int32, 0, l.n), make([]int32, 0, l.n), f)
}

// runBatch is how many operations run unpacks at a time: few enough that
// they stay in the core's cache between the unpacking and the allocator
// reading them (Batch's 2.5 MB do not), still plenty per call into C.
const runBatch = 4096

// into is each, unpacking into ops, event and stack (empty, of equal
// capacity), up to their capacity at a time.
func (l *opLog) into(ops []alloc.Op, event, stack []int32, f func(ops []alloc.Op, event, stack []int32) error) error {
	ops, event, stack = ops[:cap(ops)], event[:cap(ops)], stack[:cap(ops)]
	r := logReader{l: l}
	for {
		n := r.unpack(ops, event, stack)
		if n == 0 {
			return nil
		}
		if err := f(ops[:n], event[:n], stack[:n]); err != nil || n < len(ops) {
			return err
		}
	}
}

// logReader reads a log's operations in order: unpacked into slices
// (unpack), or as the packed bytes left in the chunk it is at (rest),
// which alloc.Allocator.RunPacked applies without unpacking.
type logReader struct {
	l *opLog
	k int // the chunk it is at
	p int // and the byte
	u alloc.Unpacker
}

// rest is the packed operations left in the chunk r is at, or in the next
// chunk when that one is read (nil at the log's end).
func (r *logReader) rest() []byte {
	for ; r.k < len(r.l.chunks); r.k, r.p = r.k+1, 0 {
		if c := r.l.bytes(r.k); r.p < len(c) {
			return c[r.p:]
		}
	}
	return nil
}

// unpack unpacks the next operations into ops, event and stack until the
// log or ops ends and returns how many.
func (r *logReader) unpack(ops []alloc.Op, event, stack []int32) int {
	n := 0
	for n < len(ops) {
		c := r.rest()
		if c == nil {
			break
		}
		got, used := r.u.Unpack(c, ops[n:], event[n:], stack[n:]) // C: Go's bounds checks cost about as much again
		r.p, n = r.p+used, n+got
	}
	return n
}

// applyPacked applies the next len(ops) operations (fewer at the log's
// end) on a, from op index base, as alloc.Allocator.RunPacked reads them
// from the chunks r is at into ops and event, with sizes (nil:
// none) as RunSized's: one batch of Run, without the pass that unpacks it
// first. A batch that spans two chunks takes a call for each: the batches
// are those of an unpacking pass.
func (r *logReader) applyPacked(a *alloc.Allocator, base int, tl *alloc.Timeline, ops []alloc.Op, event []int32, sizes []uint64) (alloc.Result, error) {
	var res alloc.Result
	for res.Done < len(ops) {
		c := r.rest()
		if c == nil {
			break
		}
		d := res.Done
		var sz []uint64
		if sizes != nil {
			sz = sizes[d:]
		}
		part, used, err := a.RunPacked(&r.u, c, len(ops)-d, base+d, tl, ops[d:], event[d:], sz)
		r.p += used
		addRun(&res, part)
		if part.OOM != nil || err != nil {
			return res, err
		}
	}
	return res, nil
}

// run replays the log's first limit operations on a, Batch operations at
// a time, as RunBatches does a slice; events maps the op index of each
// out-of-memory to its Event; check (nil: none) compares each batch with
// the recording; st (nil: none) steps through each batch; observe (nil:
// none) is handed the ops each batch applied (Options.Observe), with
// the sizes of the blocks they freed when sized says so before each
// batch (Options.BlockSizes) and it is not stepped. Unless st or a twin
// that runs wants a batch unpacked before it runs, C reads the ops from
// the packed log as it applies them (applyPacked).
func (l *opLog) run(ctx context.Context, a *alloc.Allocator, tl *alloc.Timeline, events map[int]int32, limit int, tw *twin, check *checker, st *Stepper,
	observe func(base int, ops []alloc.Op, event []int32, sizes []uint64, tl *alloc.Timeline), sized func() bool) (alloc.Result, error) {
	var total alloc.Result
	m := min(l.n, runBatch)
	var sizes []uint64
	if sized != nil && observe != nil && st == nil {
		sizes = make([]uint64, m)
	}
	all, allEvent, allStack := make([]alloc.Op, m), make([]int32, m), make([]int32, m)
	r := logReader{l: l}
	for total.Done < limit {
		if ctx != nil {
			if err := ctx.Err(); err != nil {
				return total, err
			}
		}
		base := total.Done
		k := min(m, limit-base)
		ops, event, stack := all[:k], allEvent[:k], allStack[:k]
		var res alloc.Result
		var err error
		var sz []uint64
		if sizes != nil && st == nil && sized() {
			sz = sizes[:k]
		}
		if st == nil && (tw == nil || tw.off || tw.done) {
			// no one wants the batch unpacked before it runs (a twin
			// decides after the first batch whether it runs: until then
			// it may want it, and takes it from the other way)
			res, err = r.applyPacked(a, base, tl, ops, event, sz)
			if res.Done == 0 && res.OOM == nil && err == nil {
				break // the log's end
			}
		} else {
			n := r.unpack(ops, event, stack)
			if n == 0 {
				break
			}
			ops, event, stack = ops[:n], event[:n], stack[:n]
			switch {
			case st != nil:
				res, err = st.run(a, ops, base, tl, event, stack)
			case sz != nil:
				res, err = a.RunSized(ops, base, tl, sz[:n])
			default:
				res, err = a.Run(ops, base, tl)
			}
		}
		if err == nil {
			check.batch(a, base, res)
			if observe != nil {
				if sz != nil {
					sz = sz[:res.Done]
				}
				observe(base, ops[:res.Done], event[:res.Done], sz, tl)
			}
		}
		addRun(&total, res)
		for _, s := range res.Survived {
			events[s.OpIndex] = event[s.OpIndex-base]
		}
		if res.OOM != nil {
			events[res.OOM.OpIndex] = event[res.OOM.OpIndex-base]
			return total, nil
		}
		if err != nil {
			return total, err
		}
		tw.step(a, ops[:res.Done], base)
	}
	return total, nil
}

// uvarint reads the uvarint at c[p:] and returns it and the index after it.
func uvarint(c []byte, p int) (uint64, int) {
	if b := c[p]; b < 0x80 {
		return uint64(b), p + 1
	}
	return uvarintLong(c, p)
}

// uvarintLong is uvarint for one of two bytes or more. The bytes were
// appended by binary.AppendUvarint: unlike binary.Uvarint it need not
// look for one too long or cut short.
func uvarintLong(c []byte, p int) (uint64, int) {
	v := uint64(c[p] & 0x7f)
	for s := uint(7); ; s += 7 {
		p++
		b := c[p]
		if b < 0x80 {
			return v | uint64(b)<<s, p + 1
		}
		v |= uint64(b&0x7f) << s
	}
}

type errStop struct{}

func (errStop) Error() string { return "stop" }
