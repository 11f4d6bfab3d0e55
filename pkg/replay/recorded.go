package replay

import (
	"encoding/binary"
	"math/bits"

	"github.com/gpumem/gpumem/pkg/trace"
)

// recorded holds a plan's Recorded events packed a few bytes each (about
// 12 against the 32 of a DeviceEvent), in blocks of recBlock events, each
// event's fields as differences from the event before it in its block
// (address and size as their low bytes, which a byte of lengths counts):
// a long trace's device events take little memory. The blocks fill chunks
// that grow from firstChunk to logChunk bytes, as an opLog's: a long
// trace's are not one slice copied as it grows. The cap reads them by
// index (at, through a cache of two unpacked blocks), the replay's check
// in order (cursor). The last events, which the plan may still move to a
// later op (retag), stay unpacked in tail until later ops follow them.
type recorded struct {
	chunks [][]byte
	starts []uint32 // where each packed block begins: its chunk<<recChunkShift | its offset there
	tail   []DeviceEvent
	n      int  // events, packed and in tail
	device bool // one of them is a segment event (not an oom, not after)
	cache  [2]recCache
	last   int // the cache entry used last
}

// recBlock is how many events a packed block holds.
const recBlock = 64

// maxRecBlock is more than the longest packed block: recBlock events of
// a header and an action byte, a byte of lengths, Op and Event as
// uvarints of 64 bits, the address and size (8 bytes each) and the
// stream (a uvarint of 32 bits), then 8 bytes of padding.
const maxRecBlock = recBlock*(3+2*10+2*8+5) + 8

// A block's start is its chunk's index shifted by recChunkShift, or'ed
// with its offset in the chunk (below logChunk).
const recChunkShift = 20

// a chunk's offsets fit below recChunkShift, and a block fits the first
const (
	_ = uint(1<<recChunkShift - logChunk)
	_ = uint(firstChunk - maxRecBlock)
)

// recCache is one unpacked block; k1 is its index + 1, 0 when empty.
type recCache struct {
	k1 int
	ev [recBlock]DeviceEvent
}

// Header byte of a packed event: its action, then flags.
const (
	rAction     = 0x0f   // 0: the action follows as a byte
	rAfter      = 1 << 4 // DeviceEvent.after
	rStreamSame = 1 << 5 // the stream is the previous event's
)

// add appends e.
func (r *recorded) add(e DeviceEvent) {
	r.tail = append(r.tail, e)
	r.n++
	if !e.after && e.Action != trace.ActionOOM {
		r.device = true
	}
	// a block whose events all precede the last event's op cannot be
	// retagged any more
	if len(r.tail) >= 2*recBlock && r.tail[recBlock-1].Op < r.tail[len(r.tail)-1].Op {
		r.pack(r.tail[:recBlock])
		r.tail = append(r.tail[:0], r.tail[recBlock:]...)
	}
}

// retag moves the last events, those at op at, to op after.
func (r *recorded) retag(at, after int) {
	for k := len(r.tail) - 1; k >= 0 && int(r.tail[k].Op) == at; k-- {
		r.tail[k].Op = int32(after)
	}
}

// pack appends one block of events.
func (r *recorded) pack(ev []DeviceEvent) {
	r.chunks = withRoom(r.chunks, maxRecBlock)
	k := len(r.chunks) - 1
	r.starts = append(r.starts, uint32(k<<recChunkShift|len(r.chunks[k])))
	b := r.chunks[k]
	var p DeviceEvent
	for i := range ev {
		e := &ev[i]
		h := byte(0)
		if e.Action <= rAction {
			h = byte(e.Action)
		}
		if e.after {
			h |= rAfter
		}
		if i > 0 && e.stream == p.stream {
			h |= rStreamSame
		}
		b = append(b, h)
		if h&rAction == 0 {
			b = append(b, byte(e.Action))
		}
		addr := zigzag(int64(e.Addr - p.Addr))
		la, ls := byteLen(addr), byteLen(e.Size)
		b = append(b, byte(la|ls<<4))
		b = binary.AppendUvarint(b, zigzag(int64(e.Op)-int64(p.Op)))
		b = binary.AppendUvarint(b, zigzag(int64(e.Event)-int64(p.Event)))
		b = binary.LittleEndian.AppendUint64(b, addr)[:len(b)+la]
		b = binary.LittleEndian.AppendUint64(b, e.Size)[:len(b)+ls]
		if h&rStreamSame == 0 {
			b = binary.AppendUvarint(b, uint64(e.stream))
		}
		p = *e
	}
	// unpack reads 8 bytes for each address and size
	r.chunks[k] = append(b, make([]byte, 8)...)
}

// byteLen is how many bytes v takes, its high zero bytes left out.
func byteLen(v uint64) int { return (bits.Len64(v) + 7) / 8 }

// lowBytes[n] keeps the low n bytes of a word.
var lowBytes = [9]uint64{0, 1<<8 - 1, 1<<16 - 1, 1<<24 - 1, 1<<32 - 1, 1<<40 - 1, 1<<48 - 1, 1<<56 - 1, ^uint64(0)}

// zigzag maps small differences of either sign to small uvarints.
func zigzag(d int64) uint64 { return uint64(d<<1) ^ uint64(d>>63) }

func unzigzag(v uint64) int64 { return int64(v>>1) ^ -int64(v&1) }

// unpack unpacks block k into ev.
func (r *recorded) unpack(k int, ev *[recBlock]DeviceEvent) {
	s := r.starts[k]
	c := r.chunks[s>>recChunkShift][s&(1<<recChunkShift-1):]
	var e DeviceEvent
	p := 0
	for i := range ev {
		h := c[p]
		p++
		e.Action, e.after = trace.Action(h&rAction), h&rAfter != 0
		if e.Action == 0 {
			e.Action = trace.Action(c[p])
			p++
		}
		la, ls := int(c[p]&15), int(c[p]>>4)
		var d uint64
		d, p = uvarint(c, p+1)
		e.Op += int32(unzigzag(d))
		d, p = uvarint(c, p)
		e.Event += int32(unzigzag(d))
		e.Addr += uint64(unzigzag(binary.LittleEndian.Uint64(c[p:]) & lowBytes[la]))
		p += la
		e.Size = binary.LittleEndian.Uint64(c[p:]) & lowBytes[ls]
		p += ls
		if h&rStreamSame == 0 {
			var s uint64
			s, p = uvarint(c, p)
			e.stream = uint32(s)
		}
		ev[i] = e
	}
}

// block is block k unpacked, from the cache; a block not there takes the
// place of the one used less recently.
func (r *recorded) block(k int) *[recBlock]DeviceEvent {
	i := r.last
	if r.cache[i].k1 != k+1 {
		i = 1 - i
		if r.cache[i].k1 != k+1 {
			r.unpack(k, &r.cache[i].ev)
			r.cache[i].k1 = k + 1
		}
		r.last = i
	}
	return &r.cache[i].ev
}

// len is the number of events.
func (r *recorded) len() int { return r.n }

// get is event k (valid until the next get).
func (r *recorded) get(k int) *DeviceEvent {
	if b := len(r.starts); k >= b*recBlock {
		return &r.tail[k-b*recBlock]
	}
	return &r.block(k / recBlock)[k%recBlock]
}

// at is event k as the cap reads it.
func (r *recorded) at(k int) capEvent {
	e := r.get(k)
	return capEvent{e.Action, e.Addr, e.Size, uint64(e.stream)}
}

// all is every event, unpacked.
func (r *recorded) all() []DeviceEvent {
	out := make([]DeviceEvent, 0, r.n)
	c := r.cursor()
	for e := c.peek(); e != nil; e = c.peek() {
		out = append(out, *e)
		c.next()
	}
	return out
}

// cursor reads the events in order, from the first.
func (r *recorded) cursor() *recCursor { return &recCursor{r: r} }

// recCursor reads a recorded's events in order, a block unpacked at a
// time into its own buffer (the cache is the cap's).
type recCursor struct {
	r   *recorded
	at  []DeviceEvent // the events of the block being read, from the next
	blk int           // the next block to read
	ev  [recBlock]DeviceEvent
}

// peek is the next event, nil past the last (valid until next).
func (c *recCursor) peek() *DeviceEvent {
	if len(c.at) == 0 && !c.fill() {
		return nil
	}
	return &c.at[0]
}

// next moves past the next event.
func (c *recCursor) next() { c.at = c.at[1:] }

// fill reads the next block, or the tail after the last; false past the
// end.
func (c *recCursor) fill() bool {
	r := c.r
	switch {
	case c.blk < len(r.starts):
		r.unpack(c.blk, &c.ev)
		c.at = c.ev[:]
	case c.blk == len(r.starts):
		c.at = r.tail
	default:
		return false
	}
	c.blk++
	return len(c.at) > 0
}

// newRecorded is a recorded holding events, for a plan made by hand.
func newRecorded(events []DeviceEvent) recorded {
	var r recorded
	for _, e := range events {
		r.add(e)
	}
	return r
}

// withRoom is chunks with a last chunk that has room for n more bytes:
// a new chunk, twice the size of the last up to logChunk, when it has
// not.
func withRoom(chunks [][]byte, n int) [][]byte {
	k := len(chunks) - 1
	if k >= 0 && cap(chunks[k])-len(chunks[k]) >= n {
		return chunks
	}
	size := firstChunk
	if k >= 0 {
		size = min(2*cap(chunks[k]), logChunk)
	}
	return append(chunks, make([]byte, 0, size))
}
