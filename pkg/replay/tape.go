package replay

import (
	"encoding/binary"

	"github.com/gpumem/gpumem/pkg/trace"
)

// tape keeps one device's events, as the read that found its start state
// saw them, packed into a few bytes each (about 4.5 for a real trace's,
// against the 48 of a trace.Event and the much more of decoding them from
// the pickle again): the passes that need the whole trace before they can
// plan it (the snapshot planner, the walk for private pools, the planner
// with the pools found) read the tape instead of the file.
type tape struct {
	chunks [][]byte // the last one at its length as of seal
	mapped []bool   // per chunk: outside the Go heap (tapeChunk)
	// cur is the chunk add writes, at its full length, off bytes of it
	// written: add stores an int, not a slice (whose pointer costs a
	// write barrier's check), per event
	cur   []byte
	off   int
	n     int // events
	last  taped
	addrs sizeCache // the addresses and sizes taped last (appendAddr, appendSize)
	sizes sizeCache
}

// taped is what add reads of the event taped last: the fields taped as
// steps from it or flagged as the same.
type taped struct {
	addr   uint64
	stream uint64
	time   int64
	stack  int32
}

// Header byte of a taped event: its action, then flags saying which
// fields are the previous event's.
const (
	tAction     = 0x0f // 0: the action follows as a byte
	tStreamSame = 1 << 4
	tNoStack    = 1 << 5 // Stack is -1
	tStackSame  = 1 << 6 // Stack is the previous event's (and not -1)
	tTimeSame   = 1 << 7
)

// Addresses and sizes are multiples of 512 but in odd traces: an
// address's step from the last (zigzag encoded) or a size is taped as a
// uvarint of base plus v<<1|1 where v counts units of 512 bytes (a byte
// or two less than in bytes), else of base plus v<<1, else (v of 2^62 or
// more) of base plus tapeEscape, then v. A count of units is below 2^55,
// so no v<<1|1 is tapeEscape. The base is sizeSlots: an address or size
// that the tape's cache of those taped last holds is its slot there
// instead (a byte, against two or three: a program allocates the same
// few sizes again and again, and frees and reuses the addresses it was
// given). The tape and each of its readers keep their own caches and fill
// them alike, in the tape's order.
const tapeEscape = 1<<56 | 1

// appendUnits appends v, a count of 512-byte units when scaled, plus base.
func appendUnits(b []byte, v uint64, scaled bool, base uint64) []byte {
	switch {
	case scaled:
		return binary.AppendUvarint(b, base+(v<<1|1))
	case v < 1<<62:
		return binary.AppendUvarint(b, base+v<<1)
	}
	return binary.AppendUvarint(binary.AppendUvarint(b, base+tapeEscape), v)
}

// readUnits reads what appendUnits appended at c[p:] with base.
func readUnits(c []byte, p int, base uint64) (v uint64, scaled bool, next int) {
	u, p := uvarint(c, p)
	u -= base
	switch {
	case u&1 == 0:
		return u >> 1, false, p
	case u == tapeEscape:
		v, p = uvarint(c, p)
		return v, false, p
	}
	return u >> 1, true, p
}

// appendAddr appends addr, as its slot in sc or as its step from prev.
func appendAddr(b []byte, sc *sizeCache, addr, prev uint64) []byte {
	k := sc.slot(addr)
	if sc[k] == addr {
		return append(b, byte(k))
	}
	sc[k] = addr
	d := int64(addr - prev)
	if d%512 == 0 {
		return appendUnits(b, zigzag(d>>9), true, sizeSlots)
	}
	return appendUnits(b, zigzag(d), false, sizeSlots)
}

// readAddr reads what appendAddr appended at c[p:] with a cache as sc.
func readAddr(c []byte, p int, sc *sizeCache, prev uint64) (addr uint64, next int) {
	if c[p] < sizeSlots { // a one-byte uvarint: a slot
		return sc[c[p]], p + 1
	}
	v, scaled, p := readUnits(c, p, sizeSlots)
	d := unzigzag(v)
	if scaled {
		d <<= 9
	}
	addr = prev + uint64(d)
	sc[sc.slot(addr)] = addr
	return addr, p
}

// appendSize appends size, as its slot in sc or in units.
func appendSize(b []byte, sc *sizeCache, size uint64) []byte {
	k := sc.slot(size)
	if sc[k] == size {
		return append(b, byte(k))
	}
	sc[k] = size
	if size%512 == 0 {
		return appendUnits(b, size>>9, true, sizeSlots)
	}
	return appendUnits(b, size, false, sizeSlots)
}

// readSize reads what appendSize appended at c[p:] with a cache as sc.
func readSize(c []byte, p int, sc *sizeCache) (size uint64, next int) {
	if c[p] < sizeSlots { // a one-byte uvarint: a slot
		return sc[c[p]], p + 1
	}
	size, scaled, p := readUnits(c, p, sizeSlots)
	if scaled {
		size <<= 9
	}
	sc[sc.slot(size)] = size
	return size, p
}

// maxTaped is the most bytes an event takes on the tape: its header and
// action, its address and size (each an escape and a uvarint at most),
// its stream, stack and time.
const maxTaped = 2 + 2*2*binary.MaxVarintLen64 + 3*binary.MaxVarintLen64

// add appends e.
func (t *tape) add(e *trace.Event) {
	l := &t.last
	h := byte(0)
	if e.Action <= tAction {
		h = byte(e.Action)
	}
	if e.Stream == l.stream {
		h |= tStreamSame
	}
	switch {
	case e.Stack == -1:
		h |= tNoStack
	case e.Stack == l.stack:
		h |= tStackSame
	}
	if e.TimeUS == l.time {
		h |= tTimeSame
	}
	// written in place: the chunk has room for the longest event
	if len(t.cur)-t.off < maxTaped {
		t.grow()
	}
	c, p := t.cur, t.off
	c[p] = h
	p++
	if h&tAction == 0 {
		c[p] = byte(e.Action)
		p++
	}
	// an address or size a slot holds, the most of them, taped here
	if s := t.addrs.slot(e.Addr); t.addrs[s] == e.Addr {
		c[p] = byte(s)
		p++
	} else {
		p = len(appendAddr(c[:p], &t.addrs, e.Addr, l.addr))
	}
	if s := t.sizes.slot(e.Size); t.sizes[s] == e.Size {
		c[p] = byte(s)
		p++
	} else {
		p = len(appendSize(c[:p], &t.sizes, e.Size))
	}
	if h&tStreamSame == 0 {
		p = putUvarint(c, p, e.Stream)
	}
	if h&(tNoStack|tStackSame) == 0 {
		p = putUvarint(c, p, zigzag(int64(e.Stack)-int64(l.stack)))
	}
	if h&tTimeSame == 0 {
		p = putUvarint(c, p, zigzag(e.TimeUS-l.time))
	}
	t.off = p
	*l = taped{addr: e.Addr, stream: e.Stream, time: e.TimeUS, stack: e.Stack}
	t.n++
}

// grow seals the chunk add wrote and starts the next, twice as big up
// to logChunk.
func (t *tape) grow() {
	t.seal()
	size := firstChunk
	if len(t.cur) > 0 {
		size = min(2*len(t.cur), logChunk)
	}
	c, mapped := tapeChunk(size)
	t.cur, t.off = c[:cap(c)], 0
	t.chunks, t.mapped = append(t.chunks, c), append(t.mapped, mapped)
}

// seal brings the last chunk's length up to what add wrote.
func (t *tape) seal() {
	if k := len(t.chunks) - 1; k >= 0 {
		t.chunks[k] = t.cur[:t.off]
	}
}

// each hands f the events in order (e is only valid during the call); it
// stops at f's first error. With drop, each chunk is let go once read:
// the tape is empty after.
func (t *tape) each(drop bool, f func(e *trace.Event) error) error {
	r := t.reader(drop)
	var buf [256]trace.Event
	for {
		n := r.read(buf[:])
		if n == 0 {
			return nil
		}
		for i := range buf[:n] {
			if err := f(&buf[i]); err != nil {
				return err
			}
		}
	}
}

// eachRun hands see the events in order, a run at a time (evs is only
// valid during the call).
func (t *tape) eachRun(see func(evs []trace.Event)) {
	r := t.reader(false)
	var buf [256]trace.Event
	for n := r.read(buf[:]); n > 0; n = r.read(buf[:]) {
		see(buf[:n])
	}
}

// tapeReader reads a tape's events in order, a run at a time (read): a
// pass over the tape then loops over a slice of events, not a call per
// event, and the planner's pass reads them straight into its window.
type tapeReader struct {
	t    *tape
	drop bool
	k, p int         // the chunk and offset of the next event
	last trace.Event // the event read last, whose fields the next may keep
	// the tape's caches of the addresses and sizes taped last, filled
	// as add filled its own
	addrs, sizes sizeCache
}

// reader starts a read of t from its first event. With drop, each chunk
// is let go once read: the tape is empty after the last.
func (t *tape) reader(drop bool) *tapeReader {
	t.seal()
	return &tapeReader{t: t, drop: drop}
}

// read decodes the next events into dst, as many as it holds, and
// returns how many; 0 at the end of the tape.
func (r *tapeReader) read(dst []trace.Event) int {
	t := r.t
	n := 0
	// the fields decoded into r.last, which holds those an event keeps
	// of the last, then copied out: a call in the loop (a long varint)
	// would have fields kept in registers stored at every event
	e := &r.last
	for n < len(dst) && r.k < len(t.chunks) {
		c, p := t.chunks[r.k], r.p
		for ; n < len(dst) && p < len(c); n++ {
			h := c[p]
			p++
			e.Action = trace.Action(h & tAction)
			if e.Action == 0 {
				e.Action = trace.Action(c[p])
				p++
			}
			// an address or size in a slot, and a time's step of a byte,
			// the most of them, read here
			if s := c[p]; s < sizeSlots {
				e.Addr = r.addrs[s]
				p++
			} else {
				e.Addr, p = readAddr(c, p, &r.addrs, e.Addr)
			}
			if s := c[p]; s < sizeSlots {
				e.Size = r.sizes[s]
				p++
			} else {
				e.Size, p = readSize(c, p, &r.sizes)
			}
			if h&tStreamSame == 0 {
				e.Stream, p = uvarint(c, p)
			}
			switch {
			case h&tNoStack != 0:
				e.Stack = -1
			case h&tStackSame == 0:
				var v uint64
				v, p = uvarint(c, p)
				e.Stack += int32(unzigzag(v))
			}
			if h&tTimeSame == 0 {
				v := uint64(c[p])
				if v < 0x80 {
					p++
				} else {
					v, p = uvarintLong(c, p)
				}
				e.TimeUS += unzigzag(v)
			}
			// copied field by field: a copy in wider moves would wait on
			// the stores just made (a store-to-load forward fails when a
			// load spans two stores)
			d := &dst[n]
			d.Action, d.Stack, d.Addr, d.Size, d.Stream, d.TimeUS = e.Action, e.Stack, e.Addr, e.Size, e.Stream, e.TimeUS
		}
		r.p = p
		if p == len(c) { // the chunk read: the next
			if r.drop {
				t.freeChunk(r.k)
			}
			r.k, r.p = r.k+1, 0
		}
	}
	if n == 0 && r.drop && r.k == len(t.chunks) {
		t.free()
	}
	return n
}

// free lets the tape go: it is empty after.
func (t *tape) free() {
	for k := range t.chunks {
		t.freeChunk(k)
	}
	*t = tape{}
}

func (t *tape) freeChunk(k int) {
	if t.mapped[k] && t.chunks[k] != nil {
		freeTapeChunk(t.chunks[k])
	}
	t.chunks[k] = nil
}
