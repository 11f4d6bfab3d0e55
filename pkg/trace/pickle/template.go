package pickle

import (
	"encoding/binary"

	"github.com/gpumem/gpumem/pkg/trace/model"
)

// A device trace is millions of event dicts laid out alike: the same
// keys fetched from the same memo slots, the same constant values
// (compile_context "N/A", an empty frames list), and only the values of
// a few fields (action, addr, size, stream, time_us) differing. Once
// fastEvent has read such a dict, learn keeps its bytes as a template:
// runs of constant bytes, each followed by the value of one field. The
// next dict is matched against it by comparing the constant runs eight
// bytes at a time and reading the field values alone; the template's
// memo stores (MEMOIZE of the dict itself and of its constant values)
// are then made directly. A dict that differs anywhere is left to
// fastEvent, whose success teaches the template the new layout.
//
// The constant runs fetch memo slots through BINGET; their values were
// checked when the template was learned. A memo slot written again
// (memoEpoch changes) drops the template.

// Limits on a template: the bytes of a dict it covers, its steps, its
// field values.
const (
	tmplMaxLen   = 512
	tmplMaxSteps = 48
	tmplMaxVars  = 8
	tmplSlack    = 16 // bytes a step's compare may read past the dict
	varMax       = 34 // the longest value readVarValue reads
	varMaxStr    = 32 // the longest str it reads
)

// noField marks a step not followed by a field's value.
const noField = 0xff

// tmplStep is up to 16 constant bytes, then the value of field key
// unless key is noField.
type tmplStep struct {
	w, m [2]uint64 // the bytes, little endian, and the mask of those compared
	n    uint8     // constant bytes
	key  uint8
	list bool // the value is a frames list (framesList), stored if store
	// store is set for a frames list with a MEMOIZE
	store bool
}

// tmplStore is one memo store of a template's dict, into the next fresh
// slot: of the dict itself, of a constant (e, packed), or of the value
// of its from'th field.
type tmplStore struct {
	e    uint64
	from int8
}

const (
	storeConst = -1
	storeSelf  = -2
)

// template is the layout of an event dict fastEvent read.
type template struct {
	ok     bool
	epoch  uint64
	steps  []tmplStep
	base   eventFields // the fields the constant pairs set
	stores []tmplStore
	maxLen int // the most bytes a matching dict can take, plus slack
	// varStores is set when a field's value is stored
	varStores bool
	// fixed is the dict's whole layout when each field's value has an
	// opcode of fixed length (fixed.go): its bytes as fn words (in fours,
	// zero past fn) and the masks of those compared (all but the values'
	// bytes), its ints by slot, its other values, and its memo stores'
	// entries.
	fixed  bool
	fn     int
	fw, fm [fixedWords / 4][4]uint64
	fints  [numInts]fixedInt
	fvars  []fixedVar // as learned; then the values not ints
	// fact is where the action's memo index is (a BINGET's byte, or a
	// LONG_BINGET's four bytes as factMask says), if not in fvars
	fact     uint8
	factMask uint32
	// facts is the action (its str id + 1) of the memo slots the
	// action's index fetched, 0 if not known yet (fixedAction): for slot
	// j, entry j%256 holds j/256 above the action's byte (so a BINGET's
	// is the action alone), and another slot's index finds no action
	facts   [256]uint32
	fbase   eventFields // base with the fields the ints set marked set
	fsized  bool        // fbase has an address and a size
	flen    int         // the dict's bytes
	fstores [fixedStores]uint64
	nstores int
	fself   bool // the first store is of the dict itself
	next    int  // the template whose layout followed this one's last

	// run is the fixed layout as fixedRun reads it (fixedrun.go)
	run runLayout
}

// isVarField reports whether key k's value is read anew for each dict.
func isVarField(k uint64) bool {
	switch k {
	case sAction, sAddr, sDeviceFree, sSize, sStream, sTimeUS:
		return true
	}
	return false
}

// constOp reads the opcode at b[p] if its value is the same each time
// the dict is read: a scalar or short string literal, an empty list, or
// a BINGET of a slot below memoStart that holds such a value. It returns
// the value and the index past the opcode; false if it is not one.
func (d *decoder) constOp(b []byte, p int, memoStart uint64) (val, int, bool) {
	if p >= len(b) {
		return val{}, p, false
	}
	op := b[p]
	p++
	switch op {
	case opBinGet, opLongBinGet:
		var i uint64
		if op == opBinGet {
			if p+1 > len(b) {
				return val{}, p, false
			}
			i = uint64(b[p])
			p++
		} else {
			if p+4 > len(b) {
				return val{}, p, false
			}
			i = uint64(binary.LittleEndian.Uint32(b[p:]))
			p += 4
		}
		if i >= memoStart || i >= uint64(d.memoLen) {
			return val{}, p, false
		}
		e := d.memoEntry(i)
		if e == 0 {
			return val{}, p, false
		}
		v := d.unpack(e)
		switch v.k {
		case kNone, kBool, kInt, kUint, kBig, kFloat, kStr, kEmpty, kStack:
			return v, p, true
		}
		return val{}, p, false
	case opShortBinUnicode:
		if p >= len(b) || p+1+int(b[p]) > len(b) {
			return val{}, p, false
		}
		n := int(b[p])
		return val{kStr, uint64(d.intern(b[p+1 : p+1+n]))}, p + 1 + n, true
	case opLong1:
		if p >= len(b) || p+1+int(b[p]) > len(b) {
			return val{}, p, false
		}
		n := int(b[p])
		return decodeLong(b[p+1 : p+1+n]), p + 1 + n, true
	case opBinInt1, opBinInt2, opBinInt, opNone, opNewTrue, opNewFalse:
		return readVarValue(d, b, p-1, memoStart)
	case opEmptyList:
		return val{k: kEmpty}, p, true
	}
	return val{}, p, false
}

// readVarValue reads the scalar opcode at b[p] as fastEvent would: an
// int (LONG1 of 9 bytes at most), a str of varMaxStr bytes at most,
// None, a bool, or a BINGET of a slot below memoStart. b has room for
// varMax bytes at p and 8 past them.
func readVarValue(d *decoder, b []byte, p int, memoStart uint64) (val, int, bool) {
	switch b[p] {
	case opBinInt1:
		return val{kInt, uint64(b[p+1])}, p + 2, true
	case opBinInt2:
		return val{kInt, uint64(binary.LittleEndian.Uint16(b[p+1:]))}, p + 3, true
	case opBinInt:
		return val{kInt, uint64(int64(int32(binary.LittleEndian.Uint32(b[p+1:]))))}, p + 5, true
	case opLong1:
		n := int(b[p+1])
		if n > 9 {
			return val{}, p, false
		}
		if n > 0 && n <= 8 && b[p+1+n]&0x80 == 0 {
			u := binary.LittleEndian.Uint64(b[p+2:])
			if n < 8 {
				u &= 1<<(8*n) - 1
			}
			return val{kInt, u}, p + 2 + n, true
		}
		return decodeLong(b[p+2 : p+2+n]), p + 2 + n, true
	case opBinGet, opLongBinGet:
		var i uint64
		q := p + 2
		if b[p] == opBinGet {
			i = uint64(b[p+1])
		} else {
			i = uint64(binary.LittleEndian.Uint32(b[p+1:]))
			q = p + 5
		}
		if i >= memoStart {
			return val{}, p, false
		}
		e := d.memoEntry(i)
		if e == 0 {
			return val{}, p, false
		}
		return d.unpack(e), q, true
	case opShortBinUnicode:
		n := int(b[p+1])
		if n > varMaxStr {
			return val{}, p, false
		}
		return val{kStr, uint64(d.intern(b[p+2 : p+2+n]))}, p + 2 + n, true
	case opNone:
		return val{k: kNone}, p + 1, true
	case opNewTrue:
		return val{kBool, 1}, p + 1, true
	case opNewFalse:
		return val{kBool, 0}, p + 1, true
	}
	return val{}, p, false
}

// learn makes a template from the event dict fastEvent has just read
// from b[start:end] (start is past its EMPTY_DICT), with the memo dense
// (memoCount == memoMax) at memoStart slots before it. A dict it cannot
// make one of leaves the template as it was.
func (d *decoder) learn(b []byte, start, end int, memoStart uint64) {
	if end-start > tmplMaxLen || end+tmplSlack > len(b) {
		return
	}
	t := &d.tmplNext
	t.steps = t.steps[:0]
	t.stores = t.stores[:0]
	t.varStores = false
	t.fixed = true
	t.fvars = t.fvars[:0]
	t.base = eventFields{ev: model.Event{Stack: -1}}
	p := start
	if b[p] == opMemoize {
		t.stores = append(t.stores, tmplStore{from: storeSelf})
		p++
	}
	if b[p] != opMark {
		return
	}
	p++
	run := start // start of the constant run
	var seen uint64
	maxLen, nv := 0, 0
	for b[p] != opSetItems {
		k, q, ok := d.constOp(b, p, memoStart)
		if !ok || q >= end {
			return
		}
		p = q
		if k.k == kStr && k.n < numKnown {
			if seen&(1<<k.n) != 0 {
				return // a key given twice: the general path's order matters
			}
			seen |= 1 << k.n
		}
		if k.k == kStr && k.n == sFrames && b[p] == opEmptyList {
			// a list of frames fetched from the memo is a field's value;
			// an empty list, constant
			if _, at, q, ok := d.framesList(b, p+1, memoStart); ok {
				if q >= end || nv == tmplMaxVars || (at >= 0 && b[at] != opMemoize) || !t.addRun(b[run:p], sFrames) {
					return
				}
				s := &t.steps[len(t.steps)-1]
				s.list, s.store = true, at >= 0
				t.fixed = false
				if at >= 0 {
					t.stores = append(t.stores, tmplStore{from: int8(nv)})
					t.varStores = true
				}
				maxLen += p - run + varMax
				p, run = q, q
				nv++
				continue
			}
		}
		if k.k == kStr && (isVarField(k.n) || k.n == sFrames && b[p] != opEmptyList) {
			_, q, ok := readVarValue(d, b, p, memoStart)
			if !ok || q >= end || nv == tmplMaxVars || !t.addRun(b[run:p], uint8(k.n)) {
				return
			}
			maxLen += p - run + varMax
			t.addFixedVar(b[start:end], p-start, uint8(k.n))
			p, run = q, q
			if isStore(b[p]) {
				if b[p] != opMemoize {
					return
				}
				t.stores = append(t.stores, tmplStore{from: int8(nv)})
				t.varStores = true
				p++ // the MEMOIZE starts the next constant run
			}
			nv++
			continue
		}
		v, q, ok := d.constOp(b, p, memoStart)
		if !ok || q >= end {
			return
		}
		p = q
		if isStore(b[p]) {
			if b[p] != opMemoize || v.n >= 1<<56 {
				return // (a value packed to the side would be shared)
			}
			t.stores = append(t.stores, tmplStore{e: d.pack(v), from: storeConst})
			p++
		}
		if k.k == kStr && k.n < numKnown && !t.base.set(k.n, v) {
			return
		}
	}
	p++ // SETITEMS
	if p != end || !t.addRun(b[run:p], noField) {
		return
	}
	t.maxLen = maxLen + p - run + tmplSlack
	if t.fixed {
		t.fixLayout(b[start:end])
	}
	t.epoch = d.memoEpoch
	t.ok = true
	// the new template goes first, the last one's storage is reused
	last := d.tmpls[len(d.tmpls)-1]
	copy(d.tmpls[1:], d.tmpls[:len(d.tmpls)-1])
	d.tmpls[0], d.tmplNext = d.tmplNext, last
}

// addRun adds steps for the constant bytes c, the last followed by the
// value of field key.
func (t *template) addRun(c []byte, key uint8) bool {
	for {
		n := min(len(c), 16)
		if len(t.steps) == tmplMaxSteps {
			return false
		}
		var s tmplStep
		s.n = uint8(n)
		s.key = noField
		var w, m [16]byte
		copy(w[:], c[:n])
		copy(m[:], allOnes[:n])
		s.w = [2]uint64{binary.LittleEndian.Uint64(w[:]), binary.LittleEndian.Uint64(w[8:])}
		s.m = [2]uint64{binary.LittleEndian.Uint64(m[:]), binary.LittleEndian.Uint64(m[8:])}
		c = c[n:]
		if len(c) == 0 {
			s.key = key
			t.steps = append(t.steps, s)
			return true
		}
		t.steps = append(t.steps, s)
	}
}

// allOnes is the mask of up to 16 bytes compared.
var allOnes = [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// tmplEvent reads the event dict whose EMPTY_DICT is at d.buf[d.pos-1]
// if it matches one of the templates: the one that followed the last
// one matched last time first (its fixed layout, unless tried says
// fastEvents tried it, or its steps if it has none), then their fixed
// layouts, then their steps. A dict that matches a template's steps only
// teaches a template its fixed layout.
func (d *decoder) tmplEvent(tried bool) bool {
	p := d.tmplPred & (len(d.tmpls) - 1)
	if t := &d.tmpls[p]; !tried && t.ok && d.tmplRoom(t) {
		// its fixed layout, or its steps if it has none
		if t.fixed && d.fixedRead(p, d.pos) {
			return true // (fixedRead noted the templates it read with)
		}
		if !t.fixed && d.tmplRead(t) {
			d.tmplHit(p)
			return true
		}
	}
	for k := 0; k < len(d.tmpls) && d.tmpls[k].ok; k++ {
		if t := &d.tmpls[k]; k != p && t.fixed && d.tmplRoom(t) && d.fixedRead(k, d.pos) {
			return true
		}
	}
	for k := 0; k < len(d.tmpls) && d.tmpls[k].ok; k++ {
		if t := &d.tmpls[k]; d.tmplRoom(t) {
			start, memoStart := d.pos, d.memoMax
			if fixed := t.fixed; d.tmplRead(t) {
				if fixed {
					d.learn(d.buf, start, d.pos, memoStart)
				} else {
					d.tmplHit(k)
				}
				return true
			}
		}
	}
	return false
}

// tmplHit notes that template k's fixed layout matched: the template
// that follows it is the one that followed it last time. (learn moves
// the templates; a prediction it makes stale only costs a miss.)
func (d *decoder) tmplHit(k int) {
	d.tmpls[d.tmplPrev&(len(d.tmpls)-1)].next = k
	d.tmplPrev = k
	d.tmplPred = d.tmpls[k].next
}

// tmplRoom reports whether template t may be matched at d.pos: it is
// current and the buffer holds the most bytes a dict matching it takes.
func (d *decoder) tmplRoom(t *template) bool {
	if t.epoch != d.memoEpoch || uint64(d.memoCount) != d.memoMax {
		return false
	}
	if len(d.buf)-d.pos < t.maxLen {
		if d.rerr != nil {
			return false
		}
		_ = d.need(1024)
		if len(d.buf)-d.pos < t.maxLen {
			return false
		}
	}
	return true
}

// tmplRead reads the event dict whose EMPTY_DICT is at d.buf[d.pos-1]
// if it matches template t's steps (d.tmplRoom(t)), as fastEvent would;
// otherwise it changes nothing (but may intern a str of the dict).
func (d *decoder) tmplRead(t *template) bool {
	b := d.buf
	p := d.pos
	memoStart := d.memoMax
	// the first step's bytes first: a dict of another layout goes
	// before anything is set up
	if s, w := &t.steps[0], b[p:p+16:p+16]; binary.LittleEndian.Uint64(w)&s.m[0] != s.w[0] || binary.LittleEndian.Uint64(w[8:])&s.m[1] != s.w[1] {
		return false
	}
	// the event is read into its place in pending, which a failure
	// leaves beyond the slice's length
	pe, n := d.nextPending()
	pe.f = t.base
	f := &pe.f
	var vals [tmplMaxVars]val
	nv := 0
	for i := range t.steps {
		s := &t.steps[i]
		w := b[p : p+16 : p+16] // one bounds check for both words
		if binary.LittleEndian.Uint64(w)&s.m[0] != s.w[0] || binary.LittleEndian.Uint64(w[8:])&s.m[1] != s.w[1] {
			return false
		}
		p += int(s.n)
		if s.key == noField {
			continue
		}
		var v val
		if s.list {
			var at int
			var ok bool
			if b[p] != opEmptyList {
				return false
			}
			if v, at, p, ok = d.framesList(b, p+1, memoStart); !ok || s.store != (at >= 0) || at >= 0 && b[at] != opMemoize || len(b)-p < t.maxLen {
				return false // (the list's length is not in maxLen)
			}
		} else {
			switch b[p] {
			case opBinInt1:
				v = val{kInt, uint64(b[p+1])}
				p += 2
			case opBinInt:
				v = val{kInt, uint64(int64(int32(binary.LittleEndian.Uint32(b[p+1:]))))}
				p += 5
			case opLong1:
				if k := int(b[p+1]); k > 0 && k <= 8 && b[p+1+k]&0x80 == 0 {
					// non-negative and 8 bytes or fewer: the bytes zero-extended
					v = val{kInt, binary.LittleEndian.Uint64(b[p+2:]) & (uint64(1)<<(8*k) - 1)}
					p += 2 + k
					break
				}
				fallthrough
			default:
				var ok bool
				if v, p, ok = readVarValue(d, b, p, memoStart); !ok {
					return false
				}
			}
		}
		if !f.set(uint64(s.key), v) {
			return false
		}
		if t.varStores {
			vals[nv&(tmplMaxVars-1)] = v
			nv++
		}
	}
	return d.tmplDone(t, p, n, pe, &vals)
}

// tmplDone ends the read of a dict that matched template t up to b[p],
// read into pending event n, pe: false, changing nothing, if it goes to
// fastEvent after all.
func (d *decoder) tmplDone(t *template, p int, n int, pe *pendingEvent, vals *[tmplMaxVars]val) bool {
	memoStart := d.memoMax
	if c := d.buf[p]; c != opEmptyDict && c != opAppends && c != opAppend {
		return false // a dict filled by more than one SETITEMS goes the general way
	}
	if _, err := pe.f.done(d.op); err != nil {
		return false
	}
	if !d.tmplStores(t, memoStart, uint64(n), vals) {
		return false
	}
	pe.slot, pe.fetched = -1, false
	if len(t.stores) > 0 && t.stores[0].from == storeSelf {
		pe.slot = int64(memoStart)
	}
	d.pending = d.pending[:n+1]
	d.outstanding++
	d.pos = p
	d.stack = append(d.stack, val{kEventDone, uint64(n)})
	return true
}

// tmplStores makes template t's memo stores into the fresh slots from
// i, for pending event n whose field values are vals; false, changing
// nothing, if it leaves them to fastEvent (a value too wide to pack, or
// memo pages that would pass the budget or are packed).
func (d *decoder) tmplStores(t *template, i, n uint64, vals *[tmplMaxVars]val) bool {
	stores := t.stores
	if len(stores) == 0 {
		return true
	}
	if t.varStores {
		for _, s := range stores {
			if s.from >= 0 && vals[s.from].n >= 1<<56 {
				return false
			}
		}
	}
	end := i + uint64(len(stores))
	if j := i & (memoPageLen - 1); end <= uint64(d.memoLen) && j+uint64(len(stores)) <= memoPageLen {
		// one page, the usual case: the constants (a store of the dict
		// or of a field's value has e 0), then the others over them
		if pg := d.memo[i>>memoPageBits]; pg != nil {
			dst := pg[j : j+uint64(len(stores))]
			stores = stores[:len(dst)]
			for k := range dst {
				dst[k] = stores[k].e
			}
			if stores[0].from == storeSelf { // (learn puts it first)
				dst[0] = uint64(kEventDone)<<56 | n
			}
			if t.varStores {
				for k, s := range stores {
					if s.from >= 0 {
						v := vals[s.from&(tmplMaxVars-1)]
						dst[k] = uint64(v.k)<<56 | v.n
					}
				}
			}
			d.memoCount += len(stores)
			d.memoMax = end
			return true
		}
	}
	if end > uint64(d.memoLen) {
		pages := (end - uint64(d.memoLen) + memoPageLen - 1) / memoPageLen
		if d.mem+int64(pages)*memoPageLen*8 > d.limit || d.growMemo(int(end-1)) != nil {
			return false
		}
	}
	first, last := d.memo[i>>memoPageBits], d.memo[(end-1)>>memoPageBits]
	if first == nil || last == nil {
		return false
	}
	for k, s := range stores {
		e := s.e
		switch {
		case s.from >= 0:
			v := vals[s.from]
			e = uint64(v.k)<<56 | v.n
		case s.from == storeSelf:
			e = uint64(kEventDone)<<56 | n
		}
		j := i + uint64(k)
		pg := first
		if j>>memoPageBits != i>>memoPageBits {
			pg = last
		}
		pg[j&(memoPageLen-1)] = e
	}
	d.memoCount += len(stores)
	d.memoMax = end
	return true
}

// fastEvents reads the event dict whose EMPTY_DICT is at d.buf[d.pos-1]
// with the template or fastEvent, then the dicts that follow it the
// same way; false if the first is left to the general path. (The
// EMPTY_DICT of a later one that is left to it opens its dict, as run
// would.) The usual dict, laid out as the predicted template's fixed
// layout, is read with no call but fixedRead, which reads the dicts
// that follow it laid out alike too.
func (d *decoder) fastEvents() bool {
	for first := true; ; first = false {
		p := d.tmplPred & (len(d.tmpls) - 1)
		t := &d.tmpls[p]
		// tmplRoom's checks, in line
		ready := t.fixed && t.epoch == d.memoEpoch && uint64(d.memoCount) == d.memoMax && len(d.buf)-d.pos >= t.maxLen
		if ready && d.fixedRead(p, d.pos) {
			// (fixedRead noted the templates it read with: tmplHit)
		} else if !d.oneEvent(ready) {
			if first {
				return false
			}
			d.stack = append(d.stack, val{kDict, uint64(d.newCont(false))})
			return true
		}
		if d.pos >= len(d.buf) || d.buf[d.pos] != opEmptyDict || len(d.stack) >= maxStack || d.mem > d.limit {
			return true
		}
		d.op = d.base + int64(d.pos)
		d.pos++
	}
}

// oneEvent reads one event dict with the template or with fastEvent,
// which then teaches the template its layout; tried says the predicted
// template's fixed layout was tried.
func (d *decoder) oneEvent(tried bool) bool {
	if d.tmplEvent(tried) {
		return true
	}
	start, memoStart := d.base+int64(d.pos), d.memoMax
	dense := uint64(d.memoCount) == memoStart
	if d.notEvent() || !d.fastEvent() {
		return false
	}
	// fastEvent may have moved the buffer before reading the dict
	if s := start - d.base; dense && s >= 0 && d.pos-int(s) <= tmplMaxLen {
		d.learn(d.buf, int(s), d.pos, memoStart)
	}
	return true
}
