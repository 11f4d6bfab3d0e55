package pickle

import "encoding/binary"

// A snapshot holds other dicts than events: segment and block dicts (one
// a segment and each of its blocks; thousands in a big snapshot's
// segments part), frames, settings. fastEvent reads a dict to its end
// before it finds it has no "action" key, then the general path reads it
// again: for a block dict that doubles its cost. PyTorch writes an event
// dict's "action" first, and no other dict of a snapshot has that key,
// so a dict whose first key is another str goes to the general path
// straight away. (An event dict with its keys in another order is still
// read right, by the general path.)

// notEvent reports whether the dict whose EMPTY_DICT is at d.buf[d.pos-1]
// has a first key that is a str other than "action": a literal or one
// fetched from the memo. Anything else (too few bytes buffered, another
// opcode, a key that is no str) says nothing: false.
func (d *decoder) notEvent() bool {
	b := d.buf[d.pos:]
	p := 0
	if len(b) < 16 {
		return false
	}
	// the dict's own store, then MARK
	switch b[p] {
	case opMemoize:
		p++
	case opBinPut:
		p += 2
	case opLongBinPut:
		p += 5
	}
	if b[p] != opMark {
		return false
	}
	p++
	var i uint64
	switch b[p] {
	case opBinGet:
		i = uint64(b[p+1])
	case opLongBinGet:
		i = uint64(binary.LittleEndian.Uint32(b[p+1:]))
	case opShortBinUnicode:
		n := int(b[p+1])
		if p+2+n > len(b) {
			return false
		}
		return string(b[p+2:p+2+n]) != wellKnown[sAction]
	default:
		return false
	}
	if i >= d.memoMax || i >= uint64(d.memoLen) {
		return false
	}
	e := d.memoEntry(i)
	return kind(e>>56) == kStr && e&(1<<56-1) != sAction
}
