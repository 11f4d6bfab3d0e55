package pickle

import (
	"encoding/binary"
	"math/bits"
)

// A template whose field values each have an opcode of fixed length
// (ints of BININT1, BININT2, BININT or LONG1 of a given length, memo
// fetches, None, bools) has a fixed layout too: the whole dict is
// compared as words, masked where the values are, and the ints are read
// at offsets known in advance, with no step or field switch per value.

// fixedVar is a field's value in a fixed layout: its opcode at off
// bytes into the dict (past EMPTY_DICT), and the field's key.
type fixedVar struct {
	off uint16
	op  uint8
	key uint8
	vi  uint8 // its index among the template's field values
}

// fixedInt is an int field's value in a fixed layout, read as the
// mask'th bytes of the word at off, sign-extended from 64-sext bits.
type fixedInt struct {
	mask   uint64
	off    uint16
	sext   uint8
	slot   uint8 // the field: intAddr...
	vi     uint8
	nonneg bool // a negative value is refused
}

// The event fields an int sets, as fixedRead gathers them.
const (
	intAddr = iota
	intSize
	intStream
	intTime
	intFree
)

// addFixedVar notes the value of field key read from len bytes at
// b[start+off], or that the dict has no fixed layout.
func (t *template) addFixedVar(b []byte, off, vi int, key uint8) {
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
	t.fvars = append(t.fvars, fixedVar{off: uint16(off), op: op, key: key, vi: uint8(vi)})
}

// fixLayout makes the words and masks of the fixed layout of dict c,
// and sorts its values into ints and others.
func (t *template) fixLayout(c []byte) {
	nw := (len(c) + 7) / 8
	t.flen = len(c)
	t.fw, t.fm, t.fints = t.fw[:0], t.fm[:0], t.fints[:0]
	t.fbase = t.base
	var buf [tmplMaxLen + 8]byte
	var mask [tmplMaxLen + 8]byte
	copy(buf[:], c)
	for i := range c {
		mask[i] = 0xff
	}
	others := t.fvars[:0]
	for _, v := range t.fvars {
		o := int(v.off) + 1 // the opcode is compared, its argument not
		fi := fixedInt{off: uint16(o), vi: v.vi}
		switch v.op {
		case opBinInt1:
			fi.mask = 0xff
		case opBinInt2:
			fi.mask = 0xffff
		case opBinInt:
			fi.mask, fi.sext = 0xffffffff, 32
		case opLong1:
			// the length is compared, the bytes not but for the sign bit
			n := int(c[o])
			fi.off++
			fi.mask = uint64(1)<<(8*n) - 1
			clear(mask[o+1 : o+1+n])
			mask[o+n] = 0x80
		case opBinGet:
			mask[o] = 0
			others = append(others, v)
			continue
		case opLongBinGet:
			clear(mask[o : o+4])
			others = append(others, v)
			continue
		default:
			others = append(others, v)
			continue
		}
		if v.op != opLong1 {
			clear(mask[o : o+bits.OnesCount64(fi.mask)/8])
		}
		f := &t.fbase
		switch v.key {
		case sAddr:
			fi.slot, f.haveAddr = intAddr, true
		case sSize:
			fi.slot, f.haveSize = intSize, true
		case sDeviceFree:
			fi.slot, f.haveFree = intFree, true
		case sStream:
			fi.slot = intStream
		case sTimeUS:
			fi.slot = intTime
		default:
			t.fixed = false // (not an event fastEvent reads)
			return
		}
		fi.nonneg = fi.sext != 0 && fi.slot != intStream && fi.slot != intTime
		t.fints = append(t.fints, fi)
	}
	t.fvars = others
	for i := range nw {
		m := binary.LittleEndian.Uint64(mask[8*i:])
		t.fm = append(t.fm, m)
		t.fw = append(t.fw, binary.LittleEndian.Uint64(buf[8*i:])&m)
	}
}

// fixedRead reads the event dict whose EMPTY_DICT is at d.buf[d.pos-1]
// if it is laid out as template t's fixed layout (t.fixed; the buffer
// holds t.maxLen bytes at d.pos), as fastEvent would; otherwise it
// changes nothing.
func (d *decoder) fixedRead(t *template) bool {
	fw := t.fw
	fm := t.fm[:len(fw)]
	b := d.buf[d.pos:]
	b = b[:len(fw)*8+8]
	for i, w := range fw {
		if binary.LittleEndian.Uint64(b[8*i:8*i+8])&fm[i] != w {
			return false
		}
	}
	pe, n := d.nextPending()
	pe.f = t.fbase
	f := &pe.f
	var out [8]uint64
	out[intAddr], out[intSize], out[intStream], out[intTime], out[intFree] = f.ev.Addr, f.ev.Size, f.ev.Stream, uint64(f.ev.TimeUS), f.devFree
	var vals [tmplMaxVars]val
	if !fixedInts(b, t.fints, &out, &vals, t.varStores) {
		return false
	}
	f.ev.Addr, f.ev.Size, f.ev.Stream, f.ev.TimeUS, f.devFree = out[intAddr], out[intSize], out[intStream], int64(out[intTime]), out[intFree]
	memoStart := d.memoMax
	for _, fv := range t.fvars {
		p := int(fv.off)
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
		vals[fv.vi&(tmplMaxVars-1)] = v
	}
	return d.tmplDone(t, d.pos+t.flen, n, pe, &vals)
}

// fixedInts reads the ints of a fixed layout from dict b into out, by
// slot, and into vals, by value index when stores is set; false if one
// that may not be negative is. It is kept out of fixedRead: inlined, its
// loop's values do not fit in the registers beside fixedRead's, and the
// spills cost more than the call.
//
//go:noinline
func fixedInts(b []byte, fints []fixedInt, out *[8]uint64, vals *[tmplMaxVars]val, stores bool) bool {
	for i := range fints {
		fi := &fints[i]
		// never true (fixLayout puts every int in the dict), but with it
		// the compiler drops the two bounds checks of the read
		o := int(fi.off)
		if o > len(b)-8 {
			return false
		}
		x := binary.LittleEndian.Uint64(b[o:]) & fi.mask
		x = uint64(int64(x<<(fi.sext&63)) >> (fi.sext & 63))
		if fi.nonneg && int64(x) < 0 {
			return false
		}
		out[fi.slot&7] = x
		if stores {
			vals[fi.vi&(tmplMaxVars-1)] = val{kInt, x}
		}
	}
	return true
}
