package trace

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Pickle opcodes accepted by the decoder (see CPython's pickletools).
const (
	opMark            = '('
	opStop            = '.'
	opBinInt          = 'J'
	opBinInt1         = 'K'
	opBinInt2         = 'M'
	opNone            = 'N'
	opBinUnicode      = 'X'
	opBinBytes        = 'B'
	opShortBinBytes   = 'C'
	opBinFloat        = 'G'
	opAppend          = 'a'
	opAppends         = 'e'
	opDict            = 'd'
	opEmptyDict       = '}'
	opBinGet          = 'h'
	opLongBinGet      = 'j'
	opList            = 'l'
	opEmptyList       = ']'
	opBinPut          = 'q'
	opLongBinPut      = 'r'
	opSetItem         = 's'
	opSetItems        = 'u'
	opTuple           = 't'
	opEmptyTuple      = ')'
	opProto           = 0x80
	opTuple1          = 0x85
	opTuple2          = 0x86
	opTuple3          = 0x87
	opNewTrue         = 0x88
	opNewFalse        = 0x89
	opLong1           = 0x8a
	opLong4           = 0x8b
	opShortBinUnicode = 0x8c
	opBinUnicode8     = 0x8d
	opBinBytes8       = 0x8e
	opMemoize         = 0x94
	opFrame           = 0x95
)

// Limits on what a file may ask for. Real snapshots stay far below them;
// they keep corrupt input from turning into huge allocations.
const (
	bufSize      = 256 << 10
	maxString    = 64 << 20 // longest str decoded
	maxLong      = 1 << 10  // longest LONG4 payload, in bytes
	maxStack     = 1 << 22  // values on the pickle stack
	maxMarks     = 1 << 16  // nested MARKs
	memoPageBits = 14
	memoPageLen  = 1 << memoPageBits
)

// kind tells what a val holds. Values above kBytes exist only in this
// decoder: containers under construction and already-converted structs.
type kind uint8

const (
	kUnset   kind = iota // empty memo slot
	kNone                // None
	kBool                // n: 0 or 1
	kInt                 // n: int64 bits
	kUint                // n: an integer in [2^63, 2^64)
	kBig                 // an integer beyond 64 bits (usable only if ignored)
	kFloat               // n: float64 bits
	kStr                 // n: interned string id
	kBytes               // bytes; content skipped
	kTuple               // n: start<<32 | length in decoder.tuples
	kDict                // n: cont id
	kList                // n: cont id
	kEmpty               // a closed empty list
	kEvent               // n: index in decoder.pend (event dict waiting for its list)
	kEvents              // n: index in decoder.traces (closed list of events)
	kFrame               // n: frame id
	kStack               // n: stack id (closed list of frames)
	kBlock               // n: index in decoder.blocks
	kSegment             // n: index in decoder.segs
	kGone                // a memoized value that cannot be fetched again
	kSide                // memo only: n is an index in decoder.side
)

var kindNames = [...]string{
	kUnset: "nothing", kNone: "None", kBool: "bool", kInt: "int", kUint: "int",
	kBig: "big int", kFloat: "float", kStr: "str", kBytes: "bytes", kTuple: "tuple",
	kDict: "dict", kList: "list", kEmpty: "list", kEvent: "event dict",
	kEvents: "event list", kFrame: "frame dict", kStack: "frame list",
	kBlock: "block dict", kSegment: "segment dict", kGone: "re-used memo value",
}

func (k kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// val is one decoded value: 16 bytes, no pointers.
type val struct {
	k kind
	n uint64
}

// cont is a dict or list under construction. A dict whose keys mark it
// as an event, frame, block or segment is converted when its SETITEMS
// runs; anything else stays a cont until its parent takes it. After
// that it is closed and res says what it became.
type cont struct {
	list      bool
	open      bool
	shared    bool // fetched from the memo while open: never recycled
	estimated bool // events capacity already sized from the bytes left
	memo      int  // memo slot holding this cont, -1 if none
	off       int64
	res       val
	items     []val // list items, or flattened dict key/value pairs
	events    []Event
}

type frameKey struct {
	file, name uint32
	line       int
}

type decoder struct {
	r    io.Reader
	raw  []byte // buffer storage
	buf  []byte // raw[:filled]
	pos  int
	base int64 // input offset of buf[0]
	size int64 // input length, -1 if unknown
	op   int64 // offset of the opcode being decoded
	rerr error // sticky read error

	stack []val
	marks []int

	memo      [][]uint64 // pages of packed vals
	memoLen   int        // slots allocated
	memoCount int        // slots set, for MEMOIZE
	side      []val      // memo values too wide to pack

	strs  []string
	strID map[string]uint32

	conts []*cont
	free  []uint32

	pend     []Event // closed event dicts waiting for APPENDS
	pendLive int

	traces  [][]Event
	tuples  []val
	frames  []Frame
	frameID map[frameKey]int32
	stacks  [][]Frame
	stackID map[string]int32
	keyBuf  []byte
	blocks  []Block
	segs    []Segment
}

func newDecoder(r io.Reader, size int64) *decoder {
	n := bufSize
	if size >= 0 && size < bufSize {
		n = max(int(size), 64)
	}
	d := &decoder{
		r:       r,
		raw:     make([]byte, n),
		size:    size,
		strID:   make(map[string]uint32, 256),
		frameID: make(map[frameKey]int32),
		stackID: make(map[string]int32),
		stack:   make([]val, 0, 256),
	}
	d.buf = d.raw[:0]
	for _, s := range wellKnown {
		d.intern([]byte(s))
	}
	return d
}

// errorf returns a FormatError at the current opcode.
func (d *decoder) errorf(format string, args ...any) error {
	return &FormatError{Offset: d.op, Msg: fmt.Sprintf(format, args...)}
}

// need makes n bytes available at d.buf[d.pos:].
func (d *decoder) need(n int) error {
	if len(d.buf)-d.pos >= n {
		return nil
	}
	return d.fill(n)
}

func (d *decoder) fill(n int) error {
	rem := copy(d.raw, d.buf[d.pos:])
	d.base += int64(d.pos)
	d.pos = 0
	d.buf = d.raw[:rem]
	if d.rerr == nil {
		m, err := io.ReadAtLeast(d.r, d.raw[rem:], n-rem)
		d.buf = d.raw[:rem+m]
		if err != nil {
			d.rerr = err
		}
	}
	if len(d.buf) >= n {
		return nil
	}
	if d.rerr == io.EOF || d.rerr == io.ErrUnexpectedEOF {
		return d.errorf("unexpected end of data")
	}
	return fmt.Errorf("reading pickle at byte %d: %w", d.base+int64(len(d.buf)), d.rerr)
}

// checkLen bounds a length declared by the input.
func (d *decoder) checkLen(n uint64, limit int64, what string) (int, error) {
	if left := d.left(); left >= 0 && n > uint64(left) {
		return 0, d.errorf("%s of %d bytes runs past the end of the data (%d bytes left)", what, n, left)
	}
	if limit >= 0 && n > uint64(limit) {
		return 0, d.errorf("%s of %d bytes is longer than the limit of %d", what, n, limit)
	}
	return int(n), nil
}

// left is the number of input bytes after the current position, or -1.
func (d *decoder) left() int64 {
	if d.size < 0 {
		return -1
	}
	return max(d.size-d.base-int64(d.pos), 0)
}

// readLen reads an n-byte little-endian length.
func (d *decoder) readLen(n int) (uint64, error) {
	if err := d.need(n); err != nil {
		return 0, err
	}
	b := d.buf[d.pos : d.pos+n]
	d.pos += n
	switch n {
	case 1:
		return uint64(b[0]), nil
	case 4:
		return uint64(binary.LittleEndian.Uint32(b)), nil
	}
	return binary.LittleEndian.Uint64(b), nil
}

// payload returns the next n bytes. The slice is only valid until the
// next read.
func (d *decoder) payload(n int) ([]byte, error) {
	if n <= len(d.raw) {
		if err := d.need(n); err != nil {
			return nil, err
		}
		b := d.buf[d.pos : d.pos+n]
		d.pos += n
		return b, nil
	}
	// Longer than the buffer: grow the result as data arrives, so a
	// false length with an unknown input size cannot allocate it all.
	out := make([]byte, 0, len(d.raw))
	for len(out) < n {
		if d.pos == len(d.buf) {
			if err := d.fill(1); err != nil {
				return nil, err
			}
		}
		k := min(n-len(out), len(d.buf)-d.pos)
		out = append(out, d.buf[d.pos:d.pos+k]...)
		d.pos += k
	}
	return out, nil
}

// skip discards n bytes.
func (d *decoder) skip(n int) error {
	for n > 0 {
		if d.pos == len(d.buf) {
			if err := d.fill(1); err != nil {
				return err
			}
		}
		k := min(n, len(d.buf)-d.pos)
		d.pos += k
		n -= k
	}
	return nil
}

func (d *decoder) intern(b []byte) uint32 {
	if id, ok := d.strID[string(b)]; ok {
		return id
	}
	id := uint32(len(d.strs))
	s := string(b)
	d.strs = append(d.strs, s)
	d.strID[s] = id
	return id
}

func (d *decoder) readStr(lenBytes int) error {
	n, err := d.readLen(lenBytes)
	if err != nil {
		return err
	}
	m, err := d.checkLen(n, maxString, "string")
	if err != nil {
		return err
	}
	b, err := d.payload(m)
	if err != nil {
		return err
	}
	d.stack = append(d.stack, val{kStr, uint64(d.intern(b))})
	return nil
}

func (d *decoder) skipBytes(lenBytes int) error {
	n, err := d.readLen(lenBytes)
	if err != nil {
		return err
	}
	m, err := d.checkLen(n, -1, "bytes object")
	if err != nil {
		return err
	}
	if err := d.skip(m); err != nil {
		return err
	}
	d.stack = append(d.stack, val{k: kBytes})
	return nil
}

// decodeLong turns a little-endian two's complement integer into a val.
func decodeLong(b []byte) val {
	n := len(b)
	if n == 0 {
		return val{kInt, 0}
	}
	neg := b[n-1]&0x80 != 0
	ext := byte(0)
	if neg {
		ext = 0xff
	}
	// Drop redundant sign bytes.
	for n > 1 && b[n-1] == ext && (b[n-2]&0x80 != 0) == neg {
		n--
	}
	if n == 9 && !neg && b[8] == 0 {
		return val{kUint, binary.LittleEndian.Uint64(b)}
	}
	if n > 8 {
		return val{k: kBig}
	}
	var u uint64
	for i := n - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[i])
	}
	if neg && n < 8 {
		u |= ^uint64(0) << (8 * n)
	}
	return val{kInt, u}
}

// lastMark is the stack index of the innermost MARK, 0 if none.
func (d *decoder) lastMark() int {
	if len(d.marks) == 0 {
		return 0
	}
	return d.marks[len(d.marks)-1]
}

// avail reports whether n values lie above the innermost MARK.
func (d *decoder) avail(n int, opname string) error {
	if len(d.stack)-d.lastMark() < n {
		return d.errorf("%s needs %d values on the stack", opname, n)
	}
	return nil
}

// popMark removes the innermost MARK and returns its stack index; the
// value below it (the target of SETITEMS or APPENDS) must exist when
// wantTarget is set.
func (d *decoder) popMark(opname string, wantTarget bool) (int, error) {
	if len(d.marks) == 0 {
		return 0, d.errorf("%s without MARK", opname)
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	if wantTarget && m <= d.lastMark() {
		return 0, d.errorf("%s has no container below its MARK", opname)
	}
	return m, nil
}

// run decodes opcodes until STOP and returns the top-level value.
func (d *decoder) run() (val, error) {
	if err := d.need(2); err != nil {
		if len(d.buf) == 0 {
			return val{}, d.errorf("empty input, not a pickle")
		}
		return val{}, err
	}
	if d.buf[0] != opProto {
		return val{}, d.errorf("not a pickle of protocol 2 or later (first byte 0x%02x)", d.buf[0])
	}
	for {
		if len(d.stack) > maxStack {
			return val{}, d.errorf("more than %d values on the stack", maxStack)
		}
		d.op = d.base + int64(d.pos)
		if d.pos == len(d.buf) {
			if err := d.fill(1); err != nil {
				return val{}, err
			}
		}
		op := d.buf[d.pos]
		d.pos++
		var err error
		switch op {
		case opBinGet, opLongBinGet:
			var i uint64
			if i, err = d.readLen(opArgLen(op)); err == nil {
				err = d.get(i)
			}
		case opMemoize:
			if err = d.avail(1, "MEMOIZE"); err == nil {
				err = d.put(uint64(d.memoCount), d.stack[len(d.stack)-1])
			}
		case opBinPut, opLongBinPut:
			var i uint64
			if i, err = d.readLen(opArgLen(op)); err == nil {
				if err = d.avail(1, opName(op)); err == nil {
					err = d.put(i, d.stack[len(d.stack)-1])
				}
			}
		case opShortBinUnicode:
			err = d.readStr(1)
		case opBinUnicode:
			err = d.readStr(4)
		case opBinUnicode8:
			err = d.readStr(8)
		case opBinInt1:
			if err = d.need(1); err == nil {
				d.stack = append(d.stack, val{kInt, uint64(d.buf[d.pos])})
				d.pos++
			}
		case opBinInt2:
			if err = d.need(2); err == nil {
				d.stack = append(d.stack, val{kInt, uint64(binary.LittleEndian.Uint16(d.buf[d.pos:]))})
				d.pos += 2
			}
		case opBinInt:
			if err = d.need(4); err == nil {
				v := int64(int32(binary.LittleEndian.Uint32(d.buf[d.pos:])))
				d.stack = append(d.stack, val{kInt, uint64(v)})
				d.pos += 4
			}
		case opLong1:
			var b []byte
			if err = d.need(1); err == nil {
				n := int(d.buf[d.pos])
				d.pos++
				if b, err = d.payload(n); err == nil {
					d.stack = append(d.stack, decodeLong(b))
				}
			}
		case opLong4:
			err = d.long4()
		case opBinFloat:
			if err = d.need(8); err == nil {
				d.stack = append(d.stack, val{kFloat, binary.BigEndian.Uint64(d.buf[d.pos:])})
				d.pos += 8
			}
		case opMark:
			if len(d.marks) >= maxMarks {
				return val{}, d.errorf("more than %d nested MARKs", maxMarks)
			}
			d.marks = append(d.marks, len(d.stack))
		case opEmptyDict:
			d.stack = append(d.stack, val{kDict, uint64(d.newCont(false))})
		case opEmptyList:
			d.stack = append(d.stack, val{kList, uint64(d.newCont(true))})
		case opSetItems:
			var m int
			if m, err = d.popMark("SETITEMS", true); err == nil {
				err = d.setItemsOn("SETITEMS", m-1, d.stack[m:])
				d.stack = d.stack[:m]
			}
		case opSetItem:
			if err = d.avail(3, "SETITEM"); err == nil {
				t := len(d.stack) - 3
				err = d.setItemsOn("SETITEM", t, d.stack[t+1:])
				d.stack = d.stack[:t+1]
			}
		case opAppends:
			var m int
			if m, err = d.popMark("APPENDS", true); err == nil {
				err = d.appendsOn("APPENDS", m-1, d.stack[m:])
				d.stack = d.stack[:m]
			}
		case opAppend:
			if err = d.avail(2, "APPEND"); err == nil {
				t := len(d.stack) - 2
				err = d.appendsOn("APPEND", t, d.stack[t+1:])
				d.stack = d.stack[:t+1]
			}
		case opList:
			var m int
			if m, err = d.popMark("LIST", false); err == nil {
				id := d.newCont(true)
				err = d.appendItems(d.conts[id], d.stack[m:])
				d.stack = append(d.stack[:m], val{kList, uint64(id)})
			}
		case opDict:
			var m int
			if m, err = d.popMark("DICT", false); err == nil {
				if (len(d.stack)-m)%2 != 0 {
					return val{}, d.errorf("DICT with an odd number of values")
				}
				id := d.newCont(false)
				var res val
				res, err = d.addPairs(id, d.conts[id], d.stack[m:])
				d.stack = append(d.stack[:m], res)
			}
		case opTuple:
			var m int
			if m, err = d.popMark("TUPLE", false); err == nil {
				err = d.tuple(m)
			}
		case opTuple1, opTuple2, opTuple3:
			n := int(op-opTuple1) + 1
			if err = d.avail(n, opName(op)); err == nil {
				err = d.tuple(len(d.stack) - n)
			}
		case opEmptyTuple:
			err = d.tuple(len(d.stack))
		case opNone:
			d.stack = append(d.stack, val{k: kNone})
		case opNewTrue:
			d.stack = append(d.stack, val{kBool, 1})
		case opNewFalse:
			d.stack = append(d.stack, val{kBool, 0})
		case opShortBinBytes:
			err = d.skipBytes(1)
		case opBinBytes:
			err = d.skipBytes(4)
		case opBinBytes8:
			err = d.skipBytes(8)
		case opFrame:
			var n uint64
			if n, err = d.readLen(8); err == nil {
				_, err = d.checkLen(n, -1, "FRAME")
			}
		case opProto:
			if err = d.need(1); err == nil {
				p := d.buf[d.pos]
				d.pos++
				if p < 2 || p > 5 {
					err = d.errorf("unsupported pickle protocol %d", p)
				}
			}
		case opStop:
			if err = d.avail(1, "STOP"); err != nil {
				return val{}, err
			}
			return d.take(d.stack[len(d.stack)-1])
		default:
			return val{}, d.errorf("unsupported pickle opcode %s", opName(op))
		}
		if err != nil {
			return val{}, err
		}
	}
}

func opArgLen(op byte) int {
	if op == opBinGet || op == opBinPut {
		return 1
	}
	return 4
}

func (d *decoder) long4() error {
	if err := d.need(4); err != nil {
		return err
	}
	n := int32(binary.LittleEndian.Uint32(d.buf[d.pos:]))
	d.pos += 4
	if n < 0 {
		return d.errorf("LONG4 with negative length %d", n)
	}
	m, err := d.checkLen(uint64(n), maxLong, "LONG4")
	if err != nil {
		return err
	}
	b, err := d.payload(m)
	if err != nil {
		return err
	}
	d.stack = append(d.stack, decodeLong(b))
	return nil
}

// tuple replaces d.stack[m:] by a tuple of those values.
func (d *decoder) tuple(m int) error {
	items := d.stack[m:]
	start := len(d.tuples)
	for _, v := range items {
		v, err := d.take(v)
		if err != nil {
			return err
		}
		d.tuples = append(d.tuples, d.keepable(v))
	}
	n := len(d.tuples) - start
	d.stack = append(d.stack[:m], val{kTuple, uint64(start)<<32 | uint64(n)})
	return nil
}

// keepable returns v as it may be stored for later: event dicts only
// live until their list takes them.
func (d *decoder) keepable(v val) val {
	if v.k == kEvent {
		d.pendLive--
		return val{k: kGone}
	}
	return v
}

func (d *decoder) newCont(list bool) uint32 {
	var id uint32
	if n := len(d.free); n > 0 {
		id = d.free[n-1]
		d.free = d.free[:n-1]
	} else {
		id = uint32(len(d.conts))
		d.conts = append(d.conts, &cont{})
	}
	c := d.conts[id]
	c.list, c.open, c.memo, c.off = list, true, -1, d.op
	return id
}

func (d *decoder) recycle(id uint32) {
	c := d.conts[id]
	*c = cont{items: c.items[:0]}
	d.free = append(d.free, id)
}

// Memo entries are vals packed into 8 bytes: kind<<56 | payload. Values
// whose payload needs more bits go to d.side.
func (d *decoder) pack(v val) uint64 {
	if v.k == kEvent {
		v = val{k: kGone}
	}
	if v.n < 1<<56 {
		return uint64(v.k)<<56 | v.n
	}
	d.side = append(d.side, v)
	return uint64(kSide)<<56 | uint64(len(d.side)-1)
}

func (d *decoder) unpack(e uint64) val {
	v := val{kind(e >> 56), e & (1<<56 - 1)}
	if v.k == kSide {
		return d.side[v.n]
	}
	return v
}

func (d *decoder) memoAt(i int) *uint64 {
	return &d.memo[i>>memoPageBits][i&(memoPageLen-1)]
}

func (d *decoder) put(i uint64, v val) error {
	// A pickler numbers memo entries from 0 and each store costs at
	// least one byte, so no valid index exceeds the offset.
	if i > uint64(d.op) {
		return d.errorf("memo index %d out of range", i)
	}
	idx := int(i)
	for idx >= d.memoLen {
		d.memo = append(d.memo, make([]uint64, memoPageLen))
		d.memoLen += memoPageLen
	}
	slot := d.memoAt(idx)
	if *slot == 0 {
		d.memoCount++
	}
	if v.k == kDict || v.k == kList {
		c := d.conts[v.n]
		if c.open {
			if c.memo >= 0 && c.memo != idx {
				c.shared = true
			}
			c.memo = idx
		} else {
			v = c.res
		}
	}
	*slot = d.pack(v)
	return nil
}

func (d *decoder) get(i uint64) error {
	if i >= uint64(d.memoLen) {
		return d.errorf("memo key %d missing", i)
	}
	e := d.memo[i>>memoPageBits][i&(memoPageLen-1)]
	if e == 0 {
		return d.errorf("memo key %d missing", i)
	}
	v := d.unpack(e)
	if v.k == kDict || v.k == kList {
		c := d.conts[v.n]
		if c.open {
			c.shared = true
		} else {
			v = c.res
			if v.k == kEvent {
				v = val{k: kGone}
			}
		}
	}
	d.stack = append(d.stack, v)
	return nil
}

// closed records what cont id became and updates its memo slot.
func (d *decoder) closed(id uint32, c *cont, res val) {
	c.open = false
	c.res = res
	if c.memo >= 0 {
		old := uint64(kDict)<<56 | uint64(id)
		if c.list {
			old = uint64(kList)<<56 | uint64(id)
		}
		if slot := d.memoAt(c.memo); *slot == old {
			*slot = d.pack(res)
		}
	}
	if !c.shared && res.k != kDict && res.k != kList {
		d.recycle(id)
	}
}

// take resolves a value that is being stored into a parent: an open
// container is closed and converted first.
func (d *decoder) take(v val) (val, error) {
	if v.k != kDict && v.k != kList {
		return v, nil
	}
	id := uint32(v.n)
	c := d.conts[id]
	if !c.open {
		if c.res.k == kEvent {
			return val{k: kGone}, nil
		}
		return c.res, nil
	}
	if !c.list {
		// Typed dicts were converted by SETITEMS; this one is generic.
		d.closed(id, c, v)
		return v, nil
	}
	var res val
	switch {
	case len(c.events) > 0:
		ev := c.events
		if cap(ev)-len(ev) > len(ev)/4 {
			ev = append([]Event(nil), ev...)
		}
		c.events = nil
		d.traces = append(d.traces, ev)
		res = val{kEvents, uint64(len(d.traces) - 1)}
	case len(c.items) == 0:
		res = val{k: kEmpty}
	case allFrames(c.items):
		res = val{kStack, uint64(d.internStack(c.items))}
	default:
		res = v
	}
	d.closed(id, c, res)
	return res, nil
}

func allFrames(items []val) bool {
	for _, v := range items {
		if v.k != kFrame {
			return false
		}
	}
	return true
}

func (d *decoder) internStack(items []val) int32 {
	d.keyBuf = d.keyBuf[:0]
	for _, v := range items {
		d.keyBuf = binary.LittleEndian.AppendUint32(d.keyBuf, uint32(v.n))
	}
	if id, ok := d.stackID[string(d.keyBuf)]; ok {
		return id
	}
	fr := make([]Frame, len(items))
	for i, v := range items {
		fr[i] = d.frames[v.n]
	}
	id := int32(len(d.stacks))
	d.stacks = append(d.stacks, fr)
	d.stackID[string(d.keyBuf)] = id
	return id
}

func (d *decoder) internFrame(f Frame, file, name uint32) int32 {
	k := frameKey{file, name, f.Line}
	if id, ok := d.frameID[k]; ok {
		return id
	}
	id := int32(len(d.frames))
	d.frames = append(d.frames, f)
	d.frameID[k] = id
	return id
}

// appendsOn appends items to the list at d.stack[t].
func (d *decoder) appendsOn(opname string, t int, items []val) error {
	lv := d.stack[t]
	if lv.k != kList {
		return d.errorf("%s on a %s, not a list", opname, lv.k)
	}
	c := d.conts[lv.n]
	if !c.open {
		return d.errorf("list is appended to after it was used")
	}
	return d.appendItems(c, items)
}

func (d *decoder) appendItems(c *cont, items []val) error {
	for i, v := range items {
		if v.k == kEvent {
			if len(c.items) > 0 {
				return d.errorf("list mixes event dicts with other values")
			}
			if len(c.events) == cap(c.events) {
				d.growEvents(c, len(items)-i)
			}
			c.events = append(c.events, d.pend[v.n])
			d.pendLive--
			continue
		}
		if v.k == kGone {
			return d.errorf("memoized event dict fetched again from the memo (not supported)")
		}
		v, err := d.take(v)
		if err != nil {
			return err
		}
		if len(c.events) > 0 {
			return d.errorf("list mixes event dicts with other values (%s)", v.k)
		}
		c.items = append(c.items, d.keepable(v))
	}
	if d.pendLive == 0 {
		d.pend = d.pend[:0]
	}
	return nil
}

// growEvents makes room in an event list. Once the list has a few
// thousand events, the bytes they took predict how many the rest of the
// input holds, so the slice is sized once instead of being regrown (and
// copied) a dozen times.
func (d *decoder) growEvents(c *cont, more int) {
	n := len(c.events)
	want := n + more
	newCap := 0
	if !c.estimated && n >= 4096 && d.size > 0 {
		c.estimated = true
		// The events in this batch lie before d.op too.
		used := float64(d.op-c.off) / float64(want) // bytes per event so far
		left := d.size - d.op
		est := n + int(float64(left)/used*1.02) + 1024
		// An event needs more than 16 bytes of pickle.
		est = min(est, n+int(left/16)+1024)
		if est > want {
			newCap = est
		}
	}
	if newCap == 0 {
		newCap = max(want, n+n/4, 256)
	}
	ev := make([]Event, n, newCap)
	copy(ev, c.events)
	c.events = ev
}

// setItemsOn adds key/value pairs to the dict at d.stack[t]. If the
// dict is then recognised as an event, frame, block or segment, the
// slot is replaced by the converted value.
func (d *decoder) setItemsOn(opname string, t int, pairs []val) error {
	dv := d.stack[t]
	if dv.k != kDict {
		return d.errorf("%s on a %s, not a dict", opname, dv.k)
	}
	if len(pairs)%2 != 0 {
		return d.errorf("%s with an odd number of values", opname)
	}
	c := d.conts[dv.n]
	if !c.open {
		return d.errorf("dict is modified after it was used")
	}
	res, err := d.addPairs(uint32(dv.n), c, pairs)
	if err != nil {
		return err
	}
	d.stack[t] = res
	return nil
}

// addPairs adds pairs to dict c and converts it if its keys say what it
// is. It returns the value that now stands for the dict.
func (d *decoder) addPairs(id uint32, c *cont, pairs []val) (val, error) {
	for i, v := range pairs {
		switch v.k {
		case kDict, kList:
			v, err := d.take(v)
			if err != nil {
				return val{}, err
			}
			pairs[i] = v
		case kEvent:
			pairs[i] = d.keepable(v)
		}
	}
	p, start := pairs, len(c.items)
	if start > 0 {
		c.items = append(c.items, pairs...)
		p = c.items
	}
	var mask uint64
	for i := 0; i < len(p); i += 2 {
		if p[i].k == kStr && p[i].n < numKnown {
			mask |= 1 << p[i].n
		}
	}
	var res val
	switch {
	case mask&(1<<sAction) != 0:
		ev, err := d.toEvent(p, c.off)
		if err != nil {
			return val{}, err
		}
		d.pend = append(d.pend, ev)
		d.pendLive++
		res = val{kEvent, uint64(len(d.pend) - 1)}
	case mask&(1<<sFilename) != 0:
		f, err := d.toFrame(p, c.off)
		if err != nil {
			return val{}, err
		}
		res = val{kFrame, uint64(f)}
	case mask&(1<<sBlocks|1<<sSegmentType|1<<sTotalSize) != 0:
		s, err := d.toSegment(p, c.off)
		if err != nil {
			return val{}, err
		}
		d.segs = append(d.segs, s)
		res = val{kSegment, uint64(len(d.segs) - 1)}
	case mask&(1<<sState) != 0:
		b, err := d.toBlock(p, c.off)
		if err != nil {
			return val{}, err
		}
		d.blocks = append(d.blocks, b)
		res = val{kBlock, uint64(len(d.blocks) - 1)}
	default:
		// A generic dict keeps its pairs until its parent reads them.
		if start == 0 {
			c.items = append(c.items, pairs...)
		}
		return val{kDict, uint64(id)}, nil
	}
	d.closed(id, c, res)
	return res, nil
}

func floatOf(v val) float64 { return math.Float64frombits(v.n) }
