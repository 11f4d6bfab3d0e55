package pickle

import (
	"encoding/binary"
	"slices"

	"github.com/gpumem/gpumem/pkg/trace/model"
)

// A template whose field values each have an opcode of fixed length
// (ints of BININT1, BININT2, BININT or LONG1 of a given length, memo
// fetches, None, bools) has a fixed layout too: the whole dict is
// compared as words, masked where the values are, and the ints are read
// at offsets known in advance, with no step or field switch per value.
// fixedRead does all a matching dict's reading: the compare, the values,
// the checks done makes, the memo stores and the push; each in straight
// code over arrays of known length, so that the compiler checks no index.

// Limits on a fixed layout: its words (the dict's bytes, eight a word)
// and its memo stores.
const (
	fixedWords  = 16
	fixedStores = 8
	// fixedView is the bytes fixedRead looks at: the layout's words and
	// the opcode after the dict, read as a word.
	fixedView = fixedWords*8 + 8
)

// fixedVar is a field's value in a fixed layout: its opcode at off
// bytes into the dict (past EMPTY_DICT), and the field's key.
type fixedVar struct {
	off uint16
	op  uint8
	key uint8
}

// fixedInt is an int field's value in a fixed layout, read as the
// mask'th bytes of the word at off, sign-extended from bit sign (a
// BININT's 31st, the only signed one; 0 for the others). A slot the
// dict has no int for has mask 0 and reads 0.
type fixedInt struct {
	mask, sign uint64
	off        uint8
}

// The event fields an int sets: the slots of template.fints.
const (
	intAddr = iota
	intSize
	intStream
	intTime
	intFree
	numInts
)

// addFixedVar notes the value of field key read from len bytes at
// b[start+off], or that the dict has no fixed layout.
func (t *template) addFixedVar(b []byte, off int, key uint8) {
	op := b[off]
	switch op {
	case opBinInt1, opBinInt2, opBinInt, opBinGet, opLongBinGet, opNone, opNewTrue, opNewFalse:
	case opLong1:
		if k := int(b[off+1]); k == 0 || k > 8 || b[off+1+k]&0x80 != 0 {
			t.fixed = false
			return
		}
	default:
		t.fixed = false
		return
	}
	t.fvars = append(t.fvars, fixedVar{off: uint16(off), op: op, key: key})
}

// fixLayout makes the words and masks of the fixed layout of dict c,
// sorts its values into ints and others, and packs its memo stores; it
// clears t.fixed for a dict it has no room for.
func (t *template) fixLayout(c []byte) {
	t.run.ok = false
	if len(c) > fixedWords*8 || len(t.stores) > fixedStores || t.varStores {
		t.fixed = false
		return
	}
	t.fn = (len(c) + 7) / 8
	t.flen = len(c)
	t.fints = [numInts]fixedInt{}
	t.fact, t.factMask = 0, 0xff
	clear(t.facts[:])
	t.fbase = t.base
	var buf, mask [fixedWords * 8]byte
	copy(buf[:], c)
	for i := range c {
		mask[i] = 0xff
	}
	others := t.fvars[:0]
	for _, v := range t.fvars {
		o := int(v.off) + 1 // the opcode is compared, its argument not
		fi := fixedInt{off: uint8(o)}
		switch v.op {
		case opBinInt1:
			fi.mask = 0xff
			clear(mask[o : o+1])
		case opBinInt2:
			fi.mask = 0xffff
			clear(mask[o : o+2])
		case opBinInt:
			fi.mask, fi.sign = 0xffffffff, 1<<31
			clear(mask[o : o+4])
		case opLong1:
			// the length is compared, the bytes not but for the sign bit
			n := int(c[o])
			fi.off++
			fi.mask = uint64(1)<<(8*n) - 1
			clear(mask[o+1 : o+1+n])
			mask[o+n] = 0x80
		case opBinGet:
			mask[o] = 0
			if v.key == sAction {
				t.fact = uint8(o) // read by itself, the usual case
				continue
			}
			others = append(others, v)
			continue
		case opLongBinGet:
			clear(mask[o : o+4])
			if v.key == sAction {
				t.fact, t.factMask = uint8(o), 0xffffffff
				continue
			}
			others = append(others, v)
			continue
		default:
			others = append(others, v)
			continue
		}
		f := &t.fbase
		slot := 0
		switch v.key {
		case sAddr:
			slot, f.haveAddr = intAddr, true
		case sSize:
			slot, f.haveSize = intSize, true
		case sDeviceFree:
			slot, f.haveFree = intFree, true
		case sStream:
			slot = intStream
		case sTimeUS:
			slot = intTime
		default:
			t.fixed = false // (not an event fastEvent reads)
			return
		}
		t.fints[slot] = fi
	}
	t.fvars = others
	t.fsized = t.fbase.haveAddr && t.fbase.haveSize
	for i := range fixedWords {
		m := binary.LittleEndian.Uint64(mask[8*i:])
		t.fm[i/4][i%4] = m
		t.fw[i/4][i%4] = binary.LittleEndian.Uint64(buf[8*i:]) & m
	}
	t.fself = len(t.stores) > 0 && t.stores[0].from == storeSelf
	t.nstores = len(t.stores)
	t.fstores = [fixedStores]uint64{}
	for k, s := range t.stores {
		t.fstores[k] = s.e // 0 for the dict itself, set as it is read
	}
	// the view fixedRead takes must lie in the buffer
	t.maxLen = max(t.maxLen, fixedView)
	t.run.set(t)
}

// fixedRead reads the event dict whose EMPTY_DICT is at d.buf[at-1]
// (d.op) if it is laid out as the fixed layout of template p (t.fixed;
// the buffer holds t.maxLen bytes at at), as fastEvent would, then the
// dicts that follow it laid out alike while fastEvents would read them,
// and moves d.pos past the last; false, changing nothing, if the first
// is not laid out so. It notes the templates it read with (tmplHit).
//
// A layout that is not a usual one (see runLayout) goes to
// fixedReadAny. The usual dicts go to fixedRun, whose loops call
// nothing, and which goes on from one usual layout to the next (a
// trace's events switch between a few, ints of other lengths, every few
// events); the loop here reads one dict that they leave (a layout they
// do not take, an action not seen yet, an event that done must check, a
// memo store across a page) before it hands back. All keep the decoder's
// counts in locals (the events read, the memo's fresh slots, the
// position), which fixedCommit writes back once: a store to the decoder
// per event and field, and the spills that calls in the loop make, would
// cost more than the rest of the reading. The calls here (fixedAction,
// fixedVars, done, growPending, tmplStores, tmplHit) read none of those
// counts but the memo's, which is written back before tmplStores.
//
//go:noinline
func (d *decoder) fixedRead(p int, at int) bool {
	t := &d.tmpls[p&(len(d.tmpls)-1)]
	if !t.run.ok && !t.run.wide {
		if !d.fixedReadAny(t, at) {
			return false
		}
		d.tmplHit(p)
		return true
	}
	buf := d.buf // (which no read here moves)
	pend := d.pending
	n0 := len(pend)
	n := n0
	nt := n0 // the events read before template p's
	// (memoCount == memoMax here, as the callers checked: both count the
	// fresh slots the events store to, from mm on)
	mm := d.memoMax
	memo := d.memo
	// d.mem > d.limit, which only growing the memo (tmplStores) changes
	over := d.mem > d.limit
	// the events read when the stack is full
	stop := n0 + maxStack - len(d.stack)
	flen := t.flen
	for {
		if !over {
			// as many events as pend has room for, the stack takes and
			// the memo page has slots for, two each (at most) and one
			// past them
			kmax := min(cap(pend)-n, stop-n)
			var pg *[memoPageLen]uint64
			if i, j := mm>>memoPageBits, int(mm&(memoPageLen-1)); i < uint64(len(memo)) && len(memo[i]) == memoPageLen {
				pg = (*[memoPageLen]uint64)(memo[i])
				kmax = min(kmax, (memoPageLen-1-j)/2)
			} else {
				kmax = 0
			}
			if kmax > 0 {
				r := fixedRun(d, p, n > nt, at, pend[n:n+kmax], pg, uint64(n), mm)
				if r.kp >= 0 {
					// (it noted the hits of the templates before r.p)
					p, t, flen, nt = r.p, &d.tmpls[r.p], d.tmpls[r.p].flen, n+r.kp
				}
				at, n, mm = r.at, n+r.k, r.mm
				switch {
				case r.why == runEnd:
					d.fixedCommit(at, at-flen-1, n0, n, mm)
					d.fixedHit(p, n > nt)
					return true
				case r.why == runOther:
					// (a dict of another layout, which the loop below
					// would not read either)
					if n == n0 {
						return false
					}
					d.fixedCommit(at-1, at-1, n0, n, mm)
					d.fixedHit(p, n > nt)
					return true
				case n == stop:
					// (it read them all: the dict at at-1 is not read)
					d.fixedCommit(at-1, at-flen-2, n0, n, mm)
					d.fixedHit(p, n > nt)
					return true
				}
			}
		}
		// (t.maxLen >= fixedView bytes lie at at)
		b := (*[fixedView]byte)(buf[at : at+fixedView])
		// the first eight words whatever the layout's length (those past
		// it compare nothing), then the others if it has more
		x := fixedDiff((*[32]byte)(b[0:]), &t.fw[0], &t.fm[0]) | fixedDiff((*[32]byte)(b[32:]), &t.fw[1], &t.fm[1])
		if t.fn > 8 {
			x |= fixedDiff((*[32]byte)(b[64:]), &t.fw[2], &t.fm[2]) | fixedDiff((*[32]byte)(b[96:]), &t.fw[3], &t.fm[3])
		}
		if x != 0 {
			break
		}
		// a dict filled by more than one SETITEMS goes the general way
		if c := b[flen&(fixedWords*8-1)]; c != opEmptyDict && c != opAppends && c != opAppend {
			break
		}
		var act uint64 // the action's str id + 1, 0 if fvars sets it
		if t.fact != 0 {
			var j uint64
			if act, j = t.action(b); act == 0 {
				if act = d.fixedAction(t, j, mm); act == 0 {
					break
				}
			}
		}
		if n == cap(pend) {
			d.pending = pend[:n]
			d.growPending()
			pend = d.pending
		}
		pe := &pend[:n+1][n]
		f := &pe.f
		if !fixedFill(f, t, b, act) {
			break
		}
		if len(t.fvars) > 0 && !d.fixedVars(t, b, f, mm) {
			break
		}
		// done's checks, which a block event with an aligned address passes
		// (an int address and size, t.fsized, is the usual case)
		if !t.fsized || !model.IsBlockAction(f.ev.Action) || f.ev.Addr%model.MinBlock != 0 {
			if _, err := f.done(d.base + int64(at) - 1); err != nil {
				break
			}
		}
		// the memo stores, in one page as they usually lie: all of
		// t.fstores, whose entries past t.nstores are 0 as the fresh slots
		// they go to (every page below memoLen is in memo)
		slot := int64(-1)
		if t.fself {
			slot = int64(mm)
		}
		if k := t.nstores; k > 0 {
			i, j := mm>>memoPageBits, mm&(memoPageLen-1)
			var pg []uint64
			if i < uint64(len(memo)) {
				pg = memo[i] // nil if packed
			}
			if j <= memoPageLen-fixedStores && len(pg) == memoPageLen {
				dst := (*[fixedStores]uint64)((*[memoPageLen]uint64)(pg)[j : j+fixedStores])
				*dst = t.fstores
				if t.fself {
					dst[0] = uint64(kEventDone)<<56 | uint64(n)
				}
				mm += uint64(k)
			} else {
				// (tmplStores counts the slots in the decoder, and may
				// grow the memo)
				d.memoCount += int(mm - d.memoMax)
				d.memoMax = mm
				var vals [tmplMaxVars]val // (a fixed layout stores no field's value)
				ok := d.tmplStores(t, mm, uint64(n), &vals)
				mm, memo = d.memoMax, d.memo
				if !ok {
					break
				}
				over = d.mem > d.limit
			}
		}
		pe.slot, pe.fetched = slot, false
		n++
		at += flen
		// the next dict, if fastEvents would read it
		if at >= len(buf)-t.maxLen || buf[at] != opEmptyDict || n >= stop || over {
			d.fixedCommit(at, at-flen-1, n0, n, mm)
			d.fixedHit(p, true)
			return true
		}
		at++
	}
	if n == n0 {
		return false
	}
	// the dict at at-1 is not read: the position is its EMPTY_DICT
	d.fixedCommit(at-1, at-1, n0, n, mm)
	d.fixedHit(p, n > nt)
	return true
}

// fixedHit notes, for fixedRead, that template p read events (tmplHit)
// if it did.
func (d *decoder) fixedHit(p int, read bool) {
	if read {
		d.tmplHit(p)
	}
}

// fixedReadAny is fixedRead for a layout that is not the usual one
// (see runLayout): per event, it writes its counts to the decoder.
func (d *decoder) fixedReadAny(t *template, at int) bool {
	buf := d.buf // (which no read here moves)
	// room for the event in pending first, before the values below live
	// in registers (and for the next at the end of the loop, where few do)
	if len(d.pending) == cap(d.pending) {
		d.growPending()
	}
	// d.mem > d.limit, which only growing the memo (tmplStores) changes
	over := d.mem > d.limit
	for read := false; ; read = true {
		// (t.maxLen >= fixedView bytes lie at at)
		b := (*[fixedView]byte)(buf[at : at+fixedView])
		// the first eight words whatever the layout's length (those past
		// it compare nothing), then the others if it has more
		x := fixedDiff((*[32]byte)(b[0:]), &t.fw[0], &t.fm[0]) | fixedDiff((*[32]byte)(b[32:]), &t.fw[1], &t.fm[1])
		if t.fn > 8 {
			x |= fixedDiff((*[32]byte)(b[64:]), &t.fw[2], &t.fm[2]) | fixedDiff((*[32]byte)(b[96:]), &t.fw[3], &t.fm[3])
		}
		if x != 0 {
			return read
		}
		// a dict filled by more than one SETITEMS goes the general way
		if c := b[t.flen]; c != opEmptyDict && c != opAppends && c != opAppend {
			return read
		}
		memoStart := d.memoMax
		var act uint64 // the action's str id + 1, 0 if fvars sets it
		if t.fact != 0 {
			var j uint64
			if act, j = t.action(b); act == 0 {
				if act = d.fixedAction(t, j, memoStart); act == 0 {
					return read
				}
			}
		}
		n := len(d.pending)
		pe := &d.pending[:n+1][n]
		f := &pe.f
		if !fixedFill(f, t, b, act) {
			return read
		}
		if len(t.fvars) > 0 && !d.fixedVars(t, b, f, memoStart) {
			return read
		}
		// done's checks, which a block event with an aligned address passes
		// (an int address and size, t.fsized, is the usual case)
		if !t.fsized || !model.IsBlockAction(f.ev.Action) || f.ev.Addr%model.MinBlock != 0 {
			if _, err := f.done(d.op); err != nil {
				return read
			}
		}
		// the memo stores, in one page as they usually lie: all of
		// t.fstores, whose entries past t.nstores are 0 as the fresh slots
		// they go to (every page below memoLen is in d.memo)
		if k := t.nstores; k > 0 {
			i, j := memoStart>>memoPageBits, memoStart&(memoPageLen-1)
			var pg []uint64
			if i < uint64(len(d.memo)) {
				pg = d.memo[i] // nil if packed
			}
			if j <= memoPageLen-fixedStores && len(pg) == memoPageLen {
				dst := (*[fixedStores]uint64)((*[memoPageLen]uint64)(pg)[j : j+fixedStores])
				if k == 2 && t.fself {
					// the usual event's two: its dict and its frames list
					dst[0], dst[1] = uint64(kEventDone)<<56|uint64(n), t.fstores[1]
				} else {
					*dst = t.fstores
					if t.fself {
						dst[0] = uint64(kEventDone)<<56 | uint64(n)
					}
				}
				d.memoCount += k
				d.memoMax += uint64(k)
			} else {
				var vals [tmplMaxVars]val // (a fixed layout stores no field's value)
				if !d.tmplStores(t, memoStart, uint64(n), &vals) {
					return read
				}
				over = d.mem > d.limit
			}
		}
		slot := int64(-1)
		if t.fself {
			slot = int64(memoStart)
		}
		pe.slot, pe.fetched = slot, false
		// (the stack first: what append may call would make the values
		// below be loaded again after it)
		d.stack = append(d.stack, val{kEventDone, uint64(n)})
		d.outstanding++
		at += t.flen
		d.pos = at
		d.pending = d.pending[:n+1]
		if n+1 == cap(d.pending) {
			d.growPending()
		}
		// the next dict, if fastEvents would read it
		if at >= len(buf)-t.maxLen || buf[at] != opEmptyDict || len(d.stack) >= maxStack || over {
			return true
		}
		d.op = d.base + int64(at)
		at++
	}
}

// fixedCommit writes back what fixedRead kept in locals: the events
// n0 to n it read, pushed as kEventDone values; the memo's fresh slots,
// counted up to mm; the position, pos, and the offset of the EMPTY_DICT
// of the dict last looked at, op (both indices into d.buf).
func (d *decoder) fixedCommit(pos, op, n0, n int, mm uint64) {
	d.pending = d.pending[:n]
	d.outstanding += n - n0
	d.memoCount += int(mm - d.memoMax)
	d.memoMax = mm
	d.pos, d.op = pos, d.base+int64(op)
	m := len(d.stack)
	d.stack = slices.Grow(d.stack, n-n0)[:m+n-n0]
	vs := d.stack[m:]
	// (four at a time: one index, one bounds check and one add for
	// four; a run pushes thousands)
	e, k := uint64(n0), 0
	for ; k+4 <= len(vs); k += 4 {
		w := (*[4]val)(vs[k : k+4])
		w[0], w[1] = val{kEventDone, e}, val{kEventDone, e + 1}
		w[2], w[3] = val{kEventDone, e + 2}, val{kEventDone, e + 3}
		e += 4
	}
	for ; k < len(vs); k++ {
		vs[k] = val{kEventDone, e}
		e++
	}
}

// fixedDiff is the bits where the four words at q, masked by m, differ
// from w.
func fixedDiff(q *[32]byte, w, m *[4]uint64) uint64 {
	// (^ and | bind alike, left to right: each word's difference is its
	// own term)
	return (binary.LittleEndian.Uint64(q[0:])&m[0] ^ w[0]) |
		(binary.LittleEndian.Uint64(q[8:])&m[1] ^ w[1]) |
		(binary.LittleEndian.Uint64(q[16:])&m[2] ^ w[2]) |
		(binary.LittleEndian.Uint64(q[24:])&m[3] ^ w[3])
}

// fixedDiff3 is fixedDiff for three words.
func fixedDiff3(q *[24]byte, w, m *[3]uint64) uint64 {
	return (binary.LittleEndian.Uint64(q[0:])&m[0] ^ w[0]) |
		(binary.LittleEndian.Uint64(q[8:])&m[1] ^ w[1]) |
		(binary.LittleEndian.Uint64(q[16:])&m[2] ^ w[2])
}

// action is the action (its str id + 1) that the action's memo index
// in dict b fetches, as template t knows it (0 if it does not yet), and
// the index.
func (t *template) action(b *[fixedView]byte) (uint64, uint64) {
	j := uint64(binary.LittleEndian.Uint32(b[t.fact&(fixedWords*8-1):]) & t.factMask)
	if e := t.facts[j&0xff]; uint64(e>>8) == j>>8 {
		return uint64(e & 0xff), j
	}
	return 0, j
}

// fixedAction is the action (its str id + 1) of the str memo slot j
// holds, below memoStart, which template t then keeps in facts; 0 if the
// slot holds none, or what set refuses. The slot keeps its value while t
// is current: a slot written again changes memoEpoch, and t's is
// checked before each read.
//
//go:noinline
func (d *decoder) fixedAction(t *template, j uint64, memoStart uint64) uint64 {
	if j >= memoStart {
		return 0
	}
	e := d.memoEntry(j)
	if kind(e>>56) != kStr || e&(1<<56-1) > sSnapshot {
		return 0 // what set refuses
	}
	act := e&(1<<56-1) + 1
	t.facts[j&0xff] = uint32(j>>8)<<8 | uint32(act)
	return act
}

// fixedVars reads the values of fixed layout t that are not ints or
// the action from dict b into f, as set takes them; false if set
// refuses one or a memo fetch finds nothing. It is kept out of
// fixedRead, whose usual dict has none.
func (d *decoder) fixedVars(t *template, b *[fixedView]byte, f *eventFields, memoStart uint64) bool {
	for _, fv := range t.fvars {
		p := int(fv.off) & (fixedWords*8 - 1)
		var v val
		switch fv.op {
		case opBinGet, opLongBinGet:
			j := uint64(b[p+1])
			if fv.op == opLongBinGet {
				j = uint64(binary.LittleEndian.Uint32(b[p+1:]))
			}
			if j >= memoStart {
				return false
			}
			e := d.memoEntry(j)
			if e == 0 {
				return false
			}
			v = d.unpack(e)
		case opNone:
			v = val{k: kNone}
		case opNewTrue:
			v = val{kBool, 1}
		default:
			v = val{kBool, 0}
		}
		if !f.set(uint64(fv.key), v) {
			return false
		}
	}
	return true
}

// fixedInt64 reads int fi from dict b.
func fixedInt64(b *[fixedView]byte, fi *fixedInt) uint64 {
	x := binary.LittleEndian.Uint64(b[fi.off&(fixedWords*8-1):]) & fi.mask
	// (x ^ sign) - sign is x with bit sign copied into the bits above it
	return x ^ fi.sign - fi.sign
}

// fixedFill fills f with template t's event of action act read from the
// dict's bytes b, and reports whether set would take it: set refuses a
// negative address, size or device_free, which only a BININT's sign
// makes (every other int has bit 63 clear).
func fixedFill(f *eventFields, t *template, b *[fixedView]byte, act uint64) bool {
	*f = t.fbase
	f.ev.Action = model.Action(act)
	fi := &t.fints
	f.ev.Addr = fixedInt64(b, &fi[intAddr])
	f.ev.Size = fixedInt64(b, &fi[intSize])
	f.ev.Stream = fixedInt64(b, &fi[intStream])
	f.ev.TimeUS = int64(fixedInt64(b, &fi[intTime]))
	neg := f.ev.Addr | f.ev.Size
	if t.fbase.haveFree {
		f.devFree = fixedInt64(b, &fi[intFree])
		neg |= f.devFree
	}
	return int64(neg) >= 0
}
