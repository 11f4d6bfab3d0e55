package pickle

import (
	"github.com/gpumem/gpumem/pkg/trace/internal/limits"
	"github.com/gpumem/gpumem/pkg/trace/model"

	"encoding/binary"
	"fmt"
	"io"
	"maps"
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
	minBuf       = 4 << 10
	maxString    = 64 << 20 // longest str accepted (maxKeptString of it is kept)
	maxLong      = 1 << 10  // longest LONG4 payload, in bytes
	maxSkip      = 1 << 40  // longest bytes object or FRAME
	maxStack     = 1 << 20  // values on the pickle stack (16 MiB; PyTorch's pickler pushes 1000 at most)
	maxMarks     = 1 << 16  // nested MARKs
	memoPageBits = 10
	memoPageLen  = 1 << memoPageBits
)

// decoder holds the state of one ReadPickle call. It keeps its own input
// buffer rather than calling a bufio.Reader per byte: the opcode loop
// indexes buf directly and refills it in large reads.
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

	memo      [][]uint64 // pages of packed vals; nil where packed or wide holds the page
	packed    [][]byte   // pages of kinds alone (packPage)
	wide      [][]uint16 // pages of kinds and small payloads (packPage)
	spare     []uint64   // a page packPage freed
	lastPack  []byte     // the page packPage packed last, which the next may share
	memoLen   int        // slots allocated
	memoCount int        // slots set, for MEMOIZE
	memoMax   uint64     // 1 + the highest slot set
	side      []val      // memo values too wide to pack
	// lastFull is lastPack's page as it was before packPage packed it
	lastFull *[memoPageLen]uint64

	strs  []string
	strID map[string]uint32

	conts []*cont
	free  []uint32

	// mem counts the bytes the decoder has allocated for what the input
	// asked for; limit is what it may (see limits.Memory).
	mem, limit int64
	tuplesCap  int // cap(tuples) when last charged

	traces   [][]model.Event
	tuples   []val
	frames   []model.Frame
	frameID  map[frameKey]int32
	stacks   [][]model.Frame
	stackID  map[string]int32
	keyBuf   []byte
	markers  map[markerKey]int32 // countMarker's frames
	stackBuf []int32
	blocks   []model.Block
	segs     []model.Segment
	segOff   []int64 // input offset of each of segs
	// fld is eachField's field: set, a func value, takes a pointer to it,
	// which a local would make a heap allocation per dict
	fld field

	// sink, when set, takes the events instead of the event lists
	// (Stream); sinkLists numbers the lists it has seen.
	sink      Sink
	sinkLists int
	lists     []int // per device trace, its list number; -1 for an empty one
	// batch holds the run of events sinkEvents hands to sink.Events,
	// one the single event addEvent hands it
	batch []model.Event
	one   [1]model.Event
	// pending holds the events fastEvent read, until their list takes
	// them; outstanding counts those not taken yet.
	pending     []pendingEvent
	outstanding int
	moreSlots   map[uint64][]int // pending index → memo slots beyond its own
	ev          model.Event
	general     bool // read every dict the general way (tests compare the two)
	fast        fastState
	tmpls       [8]template // the layouts learned last, the last learned first
	tmplNext    template    // where learn makes the next one
	tmplPrev    int         // the template matched last
	tmplPred    int         // the template tmplEvent tries first
	frameItems  []val       // framesList's scratch
	lastFrames  lastFrames  // the frames list framesList read last
	memoEpoch   uint64      // counts memo slots written again (a template checks it)
}

func newDecoder(r io.Reader, size int64) *decoder {
	// Small inputs get a small buffer; fill grows it when more is read.
	n := minBuf
	if size >= 0 {
		n = int(min(max(size, minBuf), bufSize))
	}
	if _, ok := r.(Windower); ok {
		n = 0 // read in place
	}
	d := &decoder{
		r:       r,
		raw:     make([]byte, n),
		size:    size,
		strs:    append(make([]string, 0, 2*numKnown), wellKnown[:]...),
		strID:   maps.Clone(wellKnownID),
		frameID: make(map[frameKey]int32),
		stackID: make(map[string]int32),
		stack:   make([]val, 0, 64),
	}
	d.buf = d.raw[:0]
	d.limit = limits.Memory(size, 0)
	return d
}

// decode reads the whole input into a Snapshot.
func (d *decoder) decode() (*model.Snapshot, error) {
	top, err := d.run()
	if err != nil {
		return nil, err
	}
	s, err := d.snapshot(top)
	if err != nil {
		return nil, err
	}
	if err := d.checkMem(); err != nil {
		return nil, err
	}
	return s, nil
}

// Costs charged to d.mem, in bytes.
const (
	valCost   = 16  // a val in a container, on the stack or in a tuple
	contCost  = 128 // a container: its cont struct and pointer
	eventCost = 40
	blockCost = 40
	segCost   = 128
	frameCost = 96 // a frame and its map entry
	strCost   = 48 // a string header and map entry, besides its bytes
)

// checkMem fails once the decoder holds more than its budget. Containers
// referenced millions of times through the memo, or nested millions
// deep, cost memory out of proportion to the bytes that ask for them.
func (d *decoder) checkMem() error {
	if d.mem <= d.limit {
		return nil
	}
	if d.size < 0 {
		d.limit = limits.Memory(-1, d.base+int64(d.pos))
		if d.mem <= d.limit {
			return nil
		}
	}
	if d.limit == limits.Cap() {
		return d.errorf("decoding needs %s", limits.TooMuch(d.size, d.base+int64(d.pos), ""))
	}
	return d.errorf("decoding needs more than %d MiB of memory, out of proportion to the input (values referenced or nested millions of times?)", d.limit>>20)
}

// chargeGrowth charges a slice of vals that grew from capacity *was to
// now. The whole new array is charged: the old ones are garbage the
// runtime holds on to for a while, so a list grown to n items by append
// costs several times n.
func (d *decoder) chargeGrowth(now int, was *int) {
	if now > *was {
		d.mem += int64(now) * valCost
		*was = now
	}
}

// errorf returns a FormatError at the current opcode.
func (d *decoder) errorf(format string, args ...any) error {
	return &FormatError{Offset: d.op, Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) intern(b []byte) uint32 {
	if id, ok := d.strID[string(b)]; ok {
		return id
	}
	id := uint32(len(d.strs))
	s := string(b)
	d.mem += int64(len(s)) + strCost
	d.strs = append(d.strs, s)
	d.strID[s] = id
	return id
}

// maxKeptString is how much of a str value is kept: longer ones are cut
// (with "…") as they are read, so a hostile 60 MB value costs nothing.
// No key or name a snapshot uses comes close.
const maxKeptString = 4 << 10

func (d *decoder) readStr(lenBytes int) error {
	n, err := d.readLen(lenBytes)
	if err != nil {
		return err
	}
	m, err := d.checkLen(n, maxString, "string")
	if err != nil {
		return err
	}
	if m > maxKeptString {
		b, err := d.payload(maxKeptString)
		if err != nil {
			return err
		}
		id := d.intern([]byte(limits.Truncate(string(b), maxKeptString-len("…"))))
		if err := d.skip(m - maxKeptString); err != nil {
			return err
		}
		d.stack = append(d.stack, val{kStr, uint64(id)})
		return nil
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
	if n <= 8 && b[n-1]&0x80 == 0 {
		// the usual: a non-negative int64 (a segment's or block's
		// address), whose sign bytes, if any, change nothing
		var u uint64
		for i := n - 1; i >= 0; i-- {
			u = u<<8 | uint64(b[i])
		}
		return val{kInt, u}
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

// availOp is avail for opcode op, named only in the error: opName
// formats, and a BINPUT (protocols 2 and 3 store every value with one)
// would pay for it each time.
func (d *decoder) availOp(n int, op byte) error {
	if len(d.stack)-d.lastMark() < n {
		return d.avail(n, opName(op))
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
		if d.mem > d.limit {
			if err := d.checkMem(); err != nil {
				return val{}, err
			}
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
		case opMemoize:
			if err = d.avail(1, "MEMOIZE"); err == nil {
				err = d.put(uint64(d.memoCount), d.stack[len(d.stack)-1])
			}
		case opBinPut, opLongBinPut:
			var i uint64
			if i, err = d.readLen(opArgLen(op)); err == nil {
				if err = d.availOp(1, op); err == nil {
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
			// A dict whose first key says it is no event (a segment's,
			// block's or frame's, which open by themselves as often as a
			// run of events) skips the templates, which would each refuse
			// it. (BINGET's case is last: this call keeps the line in run
			// that cmd/gpumem/default.pgo names it by.)
			if d.general || d.notEvent() || !d.fastEvents() {
				d.stack = append(d.stack, val{kDict, uint64(d.newCont(false))})
			}
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
				err = d.addPairs(d.conts[id], d.stack[m:])
				d.stack = append(d.stack[:m], val{kDict, uint64(id)})
			}
		case opTuple:
			var m int
			if m, err = d.popMark("TUPLE", false); err == nil {
				err = d.tuple(m)
			}
		case opTuple1, opTuple2, opTuple3:
			n := int(op-opTuple1) + 1
			if err = d.availOp(n, op); err == nil {
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
		case opBinGet, opLongBinGet:
			// a scalar in an unpacked page, the usual fetch of a segment's
			// or block's key, is pushed here; get does the rest
			if op == opBinGet && d.pos < len(d.buf) {
				i := uint64(d.buf[d.pos])
				if i < uint64(d.memoLen) {
					if pg := d.memo[i>>memoPageBits]; pg != nil {
						if e := pg[i&(memoPageLen-1)]; plainEntry(e) {
							d.stack = append(d.stack, val{kind(e >> 56), e & (1<<56 - 1)})
							d.pos++
							continue
						}
					}
				}
			}
			var i uint64
			if i, err = d.memoIndex(op); err == nil {
				err = d.get(i)
			}
		default:
			return val{}, d.errorf("unsupported pickle opcode %s", opName(op))
		}
		if err != nil {
			return val{}, err
		}
	}
}

// plainEntry reports whether memo entry e is a value get would push as
// it is: set, packed in place, and no container or pending event.
func plainEntry(e uint64) bool {
	switch kind(e >> 56) {
	case kUnset, kSide, kEventDone, kDict, kList:
		return false
	}
	return true
}

// memoIndex reads the memo index of a BINGET or LONG_BINGET. A BINGET,
// the usual fetch of a key in a segment or block dict, has its index
// read in line; readLen reads the others, and one past the buffer.
func (d *decoder) memoIndex(op byte) (uint64, error) {
	if op == opBinGet && d.pos < len(d.buf) {
		i := uint64(d.buf[d.pos])
		d.pos++
		return i, nil
	}
	return d.readLen(opArgLen(op))
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

// tuple replaces d.stack[m:] by a tuple of those values. Tuples are
// kept to the end, so their storage is charged.
func (d *decoder) tuple(m int) error {
	items := d.stack[m:]
	start := len(d.tuples)
	for _, v := range items {
		v, err := d.take(v)
		if err != nil {
			return err
		}
		d.tuples = append(d.tuples, v)
	}
	d.chargeGrowth(cap(d.tuples), &d.tuplesCap)
	n := len(d.tuples) - start
	d.stack = append(d.stack[:m], val{kTuple, uint64(start)<<32 | uint64(n)})
	return nil
}
