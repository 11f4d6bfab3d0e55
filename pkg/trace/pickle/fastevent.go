package pickle

import (
	"encoding/binary"

	"github.com/gpumem/gpumem/pkg/trace/model"
)

// The device traces are nearly the whole of a big snapshot: millions of
// event dicts, each a dozen keys fetched from the memo and scalar values.
// fastEvent reads such a dict in one go, straight from the input buffer,
// instead of pushing each key and value, filling a cont and converting it
// when its list takes it. It leaves the decoder as the general path would
// once the list has taken the event (the dict's memo slot kGone, an empty
// frames list's kEmpty, a frames list's stack); anything it does not
// expect (a frames list with a frame dict not fetched from the memo, a
// long string, a value that is not a scalar, a bad event) it leaves to
// the general path, which then reads the dict from its start.

// fastMax is the most memo stores fastEvent takes; fastPairs the most
// keys and values.
const (
	fastMax   = 24
	fastPairs = 2 * fastMax
)

// fastState is fastEvent's scratch space, kept in the decoder so that no
// call clears it.
type fastState struct {
	puts [fastMax]struct {
		i uint64
		v val
	}
	keys keyShape
}

// keyShape remembers the keys of the event dicts fastEvent read, pair by
// pair: a BINGET of a memo slot on the first page and what the slot held.
// The next dict laid out alike takes each key with a compare of its bytes
// and of the slot, not as a value to look up and check. A key that
// differs, or a slot that changed since, goes the usual way (and is
// remembered in its place).
type keyShape struct {
	n     int // pairs known
	idx   [fastMax]byte
	entry [fastMax]uint64 // a well-known str: kStr<<56 | its id
}

// isStore reports whether op stores the value below it in the memo.
func isStore(op byte) bool {
	return op == opMemoize || op == opBinPut || op == opLongBinPut
}

// fastStores counts the memo stores of the dict fastEvent reads.
type fastStores struct {
	start uint64 // the memo count before the dict
	count uint64 // MEMOIZE's next index
	n     int    // stores in fastState.puts
	low   bool   // a store below start (BINPUT), which BINGET must look at
}

// fastStore notes a MEMOIZE or BINPUT of v at b[p], if one is there, and
// returns the index after it; false when fastEvent must give up.
func (d *decoder) fastStore(b []byte, p int, v val, st *fastStores) (int, bool) {
	if p >= len(b) {
		return p, false
	}
	var i uint64
	at := uint64(d.base) + uint64(p) // the store's offset, which bounds its index
	switch b[p] {
	case opMemoize:
		i = st.count
		p++
	case opBinPut:
		if p+2 > len(b) {
			return p, false
		}
		i = uint64(b[p+1])
		p += 2
	case opLongBinPut:
		if p+5 > len(b) {
			return p, false
		}
		i = uint64(binary.LittleEndian.Uint32(b[p+1:]))
		p += 5
	default:
		return p, true
	}
	fs := &d.fast
	if st.n == fastMax || i > at {
		return p, false
	}
	if i < st.start {
		st.low = true
	}
	// a slot this dict stored already (which the memo does not show
	// yet, so that a MEMOIZE would count it as new)
	for k := range st.n {
		if fs.puts[k].i == i {
			return p, false // stored twice: leave it to the general path
		}
	}
	if i >= d.memoMax || d.memoEntry(i) == 0 {
		st.count++ // a new slot
	}
	fs.puts[st.n].i, fs.puts[st.n].v = i, v
	st.n++
	return p, true
}

// fastEvent tries to read the event dict whose EMPTY_DICT opcode is at
// d.buf[d.pos-1]. On success it has pushed a kEventDone value and moved
// past the dict's SETITEMS; otherwise it has changed nothing. It sets
// the event's fields as it reads each pair, as toEvent would from the
// dict's pairs.
func (d *decoder) fastEvent() bool {
	if len(d.buf)-d.pos < 1024 && d.rerr == nil {
		_ = d.need(1024) // fewer bytes may be left: then it reads what there is
	}
	b := d.buf
	p := d.pos
	off := d.op
	fs := &d.fast
	st := fastStores{start: uint64(d.memoCount)}
	st.count = st.start
	var mask uint64 // keyMask of the pairs so far
	np := 0         // keys and values so far
	key := uint64(numKnown)
	memoLen := uint64(d.memoLen)
	var page0 []uint64 // the memo's first page, where a trace's keys are
	if len(d.memo) > 0 {
		page0 = d.memo[0]
	}
	// the event is read into its place in pending, which a failure
	// leaves beyond the slice's length
	pe, n := d.nextPending()
	*pe = pendingEvent{f: eventFields{ev: model.Event{Stack: -1}}, slot: -1}
	f := &pe.f
	// the dict itself may be memoized: its slot says kEventDone until its
	// list takes it
	self := val{kEventDone, uint64(len(d.pending))}
	var ok bool
	if p, ok = d.fastStore(b, p, self, &st); !ok || p >= len(b) || b[p] != opMark {
		return false
	}
	if st.n == 1 {
		pe.slot = int64(fs.puts[0].i)
	}
	p++
	ks := &fs.keys
	for {
		if k := np >> 1; np&1 == 0 && k < ks.n && page0 != nil && !st.low && p+2 < len(b) {
			if i := ks.idx[k]; b[p] == opBinGet && b[p+1] == i && uint64(i) < st.start && page0[i] == ks.entry[k] && !isStore(b[p+2]) {
				key = ks.entry[k] & (1<<56 - 1)
				mask |= 1 << key
				p += 2
				np++
				continue
			}
		}
		if p >= len(b) {
			return false
		}
		op := b[p]
		p++
		var v val
		learn := -1 // the BINGET index of a key fetched from the first page
		switch op {
		case opSetItems:
			if np%2 != 0 || mask&eventKeys == 0 {
				return false
			}
			// a dict filled by more than one SETITEMS goes the general way
			if p >= len(b) || (b[p] != opEmptyDict && b[p] != opAppends && b[p] != opAppend) {
				return false
			}
			if _, err := f.done(off); err != nil {
				return false // the general path reports it where it would
			}
			d.op = d.base + int64(p) // past every store, whose index it bounds
			for k := range st.n {
				if d.putScalar(fs.puts[k].i, fs.puts[k].v) != nil {
					return false // cannot happen once checked above; kept for safety
				}
			}
			d.pos = p
			d.outstanding++
			d.pending = d.pending[:n+1]
			d.stack = append(d.stack, self)
			return true
		case opBinGet, opLongBinGet:
			var i uint64
			if op == opBinGet {
				if p >= len(b) {
					return false
				}
				i = uint64(b[p])
				p++
			} else {
				if p+4 > len(b) {
					return false
				}
				i = uint64(binary.LittleEndian.Uint32(b[p:]))
				p += 4
			}
			found := false
			if i >= st.start || st.low {
				for k := range st.n {
					if fs.puts[k].i == i {
						v, found = fs.puts[k].v, true
					}
				}
			}
			if !found {
				if i >= memoLen {
					return false
				}
				var e uint64
				if i < memoPageLen && page0 != nil {
					e = page0[i]
					if op == opBinGet {
						learn = int(i)
					}
				} else {
					e = d.memoEntry(i)
				}
				if e == 0 {
					return false
				}
				v = d.unpack(e)
			}
			switch v.k {
			case kNone, kBool, kInt, kUint, kBig, kFloat, kStr, kEmpty, kStack:
			default:
				return false
			}
		case opShortBinUnicode:
			if p >= len(b) || p+1+int(b[p]) > len(b) {
				return false
			}
			n := int(b[p])
			v = val{kStr, uint64(d.intern(b[p+1 : p+1+n]))}
			p += 1 + n
		case opBinInt1:
			if p >= len(b) {
				return false
			}
			v = val{kInt, uint64(b[p])}
			p++
		case opBinInt2:
			if p+2 > len(b) {
				return false
			}
			v = val{kInt, uint64(binary.LittleEndian.Uint16(b[p:]))}
			p += 2
		case opBinInt:
			if p+4 > len(b) {
				return false
			}
			v = val{kInt, uint64(int64(int32(binary.LittleEndian.Uint32(b[p:]))))}
			p += 4
		case opLong1:
			if p >= len(b) || p+1+int(b[p]) > len(b) {
				return false
			}
			n := int(b[p])
			if n > 0 && n <= 8 && p+9 <= len(b) && b[p+n]&0x80 == 0 {
				// non-negative and 8 bytes or fewer: the bytes zero-extended
				v = val{kInt, binary.LittleEndian.Uint64(b[p+1:]) & (1<<(8*n) - 1)}
				if n == 8 {
					v.n = binary.LittleEndian.Uint64(b[p+1:])
				}
			} else {
				v = decodeLong(b[p+1 : p+1+n])
			}
			p += 1 + n
		case opBinFloat:
			if p+8 > len(b) {
				return false
			}
			v = val{kFloat, binary.BigEndian.Uint64(b[p:])}
			p += 8
		case opNone:
			v = val{k: kNone}
		case opNewTrue:
			v = val{kBool, 1}
		case opNewFalse:
			v = val{kBool, 0}
		case opEmptyList:
			v = val{k: kEmpty} // an empty frames list
			if !st.low {
				// or one of frame dicts fetched from the memo, stored
				if fv, at, q, ok := d.framesList(b, p, st.start); ok {
					if at >= 0 {
						if _, ok := d.fastStore(b, at, fv, &st); !ok {
							return false
						}
					}
					v, p = fv, q
				}
			}
		default:
			return false
		}
		if np == fastPairs {
			return false
		}
		if p < len(b) && isStore(b[p]) {
			learn = -1
			if p, ok = d.fastStore(b, p, v, &st); !ok {
				return false
			}
		}
		if np%2 == 0 {
			key = numKnown // a key of no event field
			if v.k == kStr && v.n < numKnown {
				mask |= 1 << v.n
				key = v.n
				if k := np >> 1; learn >= 0 && kind(page0[learn]>>56) == kStr {
					ks.idx[k], ks.entry[k] = byte(learn), page0[learn]
					ks.n = max(ks.n, k+1)
				}
			}
		} else if key < numKnown && !f.set(key, v) {
			return false // the general path reports it where it would
		}
		np++
	}
}

// maxFastFrames is the most frames framesList reads.
const maxFastFrames = 1024

// framesList reads, at b[p] past an EMPTY_LIST, the rest of a list of
// frame dicts fetched from memo slots below memoStart, as PyTorch's
// pickler writes a stack whose frames it has seen: a store, MARK, a
// BINGET or LONG_BINGET for each frame, APPENDS. It returns the stack
// (interned, as the general path interns it when its dict takes it),
// the index of the list's store or -1, and the index past APPENDS; false
// for anything else (an empty list included).
func (d *decoder) framesList(b []byte, p int, memoStart uint64) (val, int, int, bool) {
	at := -1
	if p < len(b) && isStore(b[p]) {
		at = p
		switch b[p] {
		case opMemoize:
			p++
		case opBinPut:
			p += 2
		default:
			p += 5
		}
	}
	if p >= len(b) || b[p] != opMark {
		return val{}, 0, 0, false
	}
	p++
	// the same fetches as the list read last, of slots not written since
	lf := &d.lastFrames
	if n := len(lf.b); n > 0 && lf.epoch == d.memoEpoch && lf.max < memoStart && n < len(b)-p && b[p+n] == opAppends && string(b[p:p+n]) == string(lf.b) {
		return lf.v, at, p + n + 1, true
	}
	start := p
	var maxIdx uint64
	items := d.frameItems[:0]
	for p < len(b) && b[p] != opAppends {
		var i uint64
		switch {
		case b[p] == opBinGet && p+2 <= len(b):
			i = uint64(b[p+1])
			p += 2
		case b[p] == opLongBinGet && p+5 <= len(b):
			i = uint64(binary.LittleEndian.Uint32(b[p+1:]))
			p += 5
		default:
			return val{}, 0, 0, false
		}
		if i >= memoStart || i >= uint64(d.memoLen) || len(items) == maxFastFrames {
			return val{}, 0, 0, false
		}
		maxIdx = max(maxIdx, i)
		e := d.memoEntry(i)
		if kind(e>>56) != kFrame {
			return val{}, 0, 0, false
		}
		items = append(items, d.unpack(e))
	}
	d.frameItems = items
	if p >= len(b) || len(items) == 0 {
		return val{}, 0, 0, false
	}
	v := val{kStack, uint64(d.internStack(items))}
	if p-start <= maxLastFrames {
		lf.b = append(lf.b[:0], b[start:p]...)
		lf.epoch, lf.max, lf.v = d.memoEpoch, maxIdx, v
	}
	return v, at, p + 1, true
}

// lastFrames is the frames list framesList read last: the bytes of its
// fetches, of maxLastFrames at most, and the stack they made. The same
// bytes fetch the same frames while no memo slot is written again
// (memoEpoch), and make the same stack.
type lastFrames struct {
	b     []byte
	epoch uint64
	max   uint64 // the highest slot fetched
	v     val
}

const maxLastFrames = 512

// putScalar is put for a value that is no container.
func (d *decoder) putScalar(i uint64, v val) error {
	if i < uint64(d.memoLen) && v.n < 1<<56 {
		if pg := d.memo[i>>memoPageBits]; pg != nil {
			slot := &pg[i&(memoPageLen-1)]
			if *slot == 0 {
				d.memoCount++
			} else {
				d.memoEpoch++
			}
			*slot = uint64(v.k)<<56 | v.n
			d.memoMax = max(d.memoMax, i+1)
			return nil
		}
	}
	return d.put(i, v)
}

// memoEntry is memo slot i (i < memoLen), 0 when empty.
func (d *decoder) memoEntry(i uint64) uint64 {
	if pg := d.memo[i>>memoPageBits]; pg != nil {
		return pg[i&(memoPageLen-1)]
	}
	return d.packedEntry(i)
}

// pendingEvent is an event fastEvent read, until its list takes it.
type pendingEvent struct {
	f       eventFields // the event, f.ev
	slot    int64       // the dict's memo slot, -1 if none
	fetched bool        // fetched from the memo meanwhile (see get)
}

// nextPending is the place in pending an event is read into, the n-th:
// beyond the slice's length, so that a read that fails leaves it out, and
// one that succeeds takes it with d.pending[:n+1].
func (d *decoder) nextPending() (pe *pendingEvent, n int) {
	n = len(d.pending)
	if n == cap(d.pending) {
		d.growPending()
	}
	return &d.pending[:n+1][n], n
}

// growPending makes room for one more event in pending.
//
//go:noinline
func (d *decoder) growPending() {
	n := len(d.pending)
	d.pending = append(d.pending, pendingEvent{})[:n]
}

// takeEvent returns the event a kEventDone value stands for, valid until
// the next fastEvent. Its memo slots say kGone from now on, those not
// written again meanwhile (as closed leaves a slot written again).
func (d *decoder) takeEvent(v val) *model.Event {
	pe := &d.pending[v.n]
	self := uint64(kEventDone)<<56 | v.n
	if pe.slot >= 0 {
		if slot := d.memoAt(int(pe.slot)); *slot == self {
			*slot = uint64(kGone) << 56
		}
	}
	if len(d.moreSlots) > 0 {
		if more, ok := d.moreSlots[v.n]; ok {
			for _, i := range more {
				if slot := d.memoAt(i); *slot == self {
					*slot = uint64(kGone) << 56
				}
			}
			delete(d.moreSlots, v.n)
		}
	}
	if d.outstanding--; d.outstanding == 0 {
		d.pending = d.pending[:0]
	}
	return &pe.f.ev
}

// Memo pages that are done with are packed: a page whose slots hold no
// payload (the kGone of event dicts, the kEmpty of their frames lists,
// the first strings and small ints) keeps one byte a slot, its kind,
// instead of eight, and shares them with the page packed before it when
// they are alike; one whose payloads are all small (the ids of a trace's
// few strings beside them) keeps two bytes a slot, its kind and payload
// (wide). A big trace's memo has two slots an event.
const packLag = 4 // pages after a page that is packed

// A wide page's slot is kind<<wideBits | payload: every kind fits above.
const (
	wideBits = 11
	_        = uint8(1<<(16-wideBits)-1) - uint8(kEventDone) // does not compile if a kind did not fit
)

func (d *decoder) newPage() []uint64 {
	if pg := d.spare; pg != nil {
		d.spare = nil
		clear(pg)
		return pg
	}
	return make([]uint64, memoPageLen)
}

// packPage packs memo page k if each of its slots is a kind alone, or
// one with a small payload (wide). An
// open container's slot (kDict, kList) is left unpacked: closing it
// rewrites the slot. One pass over the page both checks it and compares
// its kinds with the page packed last.
func (d *decoder) packPage(k int) {
	pg := d.memo[k]
	if pg == nil {
		return
	}
	const open = 1<<kDict | 1<<kList | 1<<kSide | 1<<kEventDone
	// a page just like the one packed before it (a trace whose events all
	// look alike): compared as a whole, a memequal of a few hundred wide
	// loads, instead of pageKinds' pass slot by slot
	if d.lastFull != nil && *(*[memoPageLen]uint64)(pg) == *d.lastFull {
		d.packed[k], d.memo[k], d.spare = d.lastPack, nil, pg
		return
	}
	last := d.lastPack
	have := len(last) == memoPageLen
	if !have {
		last = noKinds[:]
	}
	low, kinds, diff := pageKinds((*[memoPageLen]uint64)(pg), (*[memoPageLen]byte)(last))
	if low >= 1<<wideBits || kinds&open != 0 {
		return
	}
	if low != 0 {
		w := make([]uint16, memoPageLen)
		for i, e := range pg {
			w[i] = uint16(e>>56)<<wideBits | uint16(e)
		}
		d.wide[k], d.memo[k], d.spare = w, nil, pg
		return
	}
	// a page like the one packed before it (a trace whose events all
	// look alike) shares its bytes: packed pages are never written
	b := d.lastPack
	if !have || diff != 0 {
		b = make([]byte, memoPageLen)
		for i, e := range pg {
			b[i] = byte(e >> 56)
		}
		d.lastPack = b
		if d.lastFull == nil {
			d.lastFull = new([memoPageLen]uint64)
		}
		*d.lastFull = *(*[memoPageLen]uint64)(pg) // (kinds alone: it is b)
	}
	d.packed[k], d.memo[k], d.spare = b, nil, pg
}

// pageKinds is, over the slots of memo page pg, the bits of their
// payloads, the set of their kinds (a kind is below 64) and the bits
// where their kinds differ from last's; when none do, the kinds are
// last's, none of them open (a packed page's, or noKinds' 0), and the
// set is not made: 0. It is kept out of packPage: inlined there, the
// loop reloads spilled values at each slot.
//
//go:noinline
func pageKinds(pg *[memoPageLen]uint64, last *[memoPageLen]byte) (low, kinds, diff uint64) {
	// four slots a turn; the payloads gathered shifted up, past the kind
	for i := 0; i < memoPageLen; i += 4 {
		q, l := (*[4]uint64)(pg[i:i+4]), (*[4]byte)(last[i:i+4])
		e0, e1, e2, e3 := q[0], q[1], q[2], q[3]
		low |= (e0 | e1 | e2 | e3) << 8
		diff |= (uint64(l[0]) ^ e0>>56) | (uint64(l[1]) ^ e1>>56) | (uint64(l[2]) ^ e2>>56) | (uint64(l[3]) ^ e3>>56)
	}
	if diff != 0 {
		for _, e := range pg {
			kinds |= 1 << (e >> 56 & 63)
		}
	}
	return low >> 8, kinds, diff
}

// noKinds stands in for the page packed last before there is one.
var noKinds [memoPageLen]byte

// unpackPage undoes packPage, for a slot written again (BINPUT may
// store at any index).
func (d *decoder) unpackPage(k int) {
	pg := make([]uint64, memoPageLen)
	for i, b := range d.packed[k] {
		pg[i] = uint64(b) << 56
	}
	for i, w := range d.wide[k] {
		pg[i] = wideEntry(w)
	}
	d.memo[k], d.packed[k], d.wide[k] = pg, nil, nil
}

func (d *decoder) packedEntry(i uint64) uint64 {
	j := i & (memoPageLen - 1)
	if b := d.packed[i>>memoPageBits]; b != nil {
		return uint64(b[j]) << 56
	}
	return wideEntry(d.wide[i>>memoPageBits][j])
}

func wideEntry(w uint16) uint64 {
	return uint64(w>>wideBits)<<56 | uint64(w&(1<<wideBits-1))
}
