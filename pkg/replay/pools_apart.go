package replay

import (
	"math/bits"
	"slices"
	"unsafe"
)

// apartSet is the set of pairs of segments known to be in different pools
// (exclusions), kept as each segment's partners: a sorted list while it
// has few, a bitset of segment indexes once that is smaller. Every pair
// is held once per side, so a pair found again (each allocation that
// passes over the same segment's blocks finds it again: a trace holds
// many more such findings than pairs) costs one lookup and no memory.
// The pairs of segments alive together can be quadratic in them (an
// allocation passes over every live segment's better block), and a
// partner's bit holds each pair in the least space either form allows.
type apartSet struct {
	rows  []apartRow // by segment; a segment past the end has no partner
	pairs int        // distinct pairs
	found int        // pairs added, again or not
}

// apartRow is one segment's partners: list (ascending) until bits is
// set, then bits alone.
type apartRow struct {
	list []int32
	bits []uint64
}

// denseAt: a list longer than this many entries per 64 segments of its
// range becomes a bitset (8 bytes per 64 segments against 4 per entry).
const denseAt = 2

func (r *apartRow) has(o int) bool {
	if r.bits != nil {
		return o>>6 < len(r.bits) && r.bits[o>>6]&(1<<(o&63)) != 0
	}
	_, ok := slices.BinarySearch(r.list, int32(o))
	return ok
}

// add puts o in the row, which does not hold it.
func (r *apartRow) add(o int) {
	if r.bits == nil {
		k, _ := slices.BinarySearch(r.list, int32(o))
		r.list = slices.Insert(r.list, k, int32(o))
		span := int(r.list[len(r.list)-1])>>6 + 1
		if len(r.list) <= 8 || len(r.list) <= denseAt*span {
			return
		}
		r.bits = make([]uint64, span, span+span/4)
		for _, x := range r.list {
			r.bits[x>>6] |= 1 << (x & 63)
		}
		r.list = nil
		return
	}
	if w := o >> 6; w >= len(r.bits) {
		r.bits = append(r.bits, make([]uint64, w+1-len(r.bits))...)
	}
	r.bits[o>>6] |= 1 << (o & 63)
}

// add notes that segments x and y (x != y) are in different pools, and
// says whether the pair is new.
func (a *apartSet) add(x, y int) bool {
	a.found++
	if n := max(x, y) + 1; n > len(a.rows) {
		a.rows = append(a.rows, make([]apartRow, n-len(a.rows))...)
	}
	if a.rows[x].has(y) {
		return false
	}
	a.rows[x].add(y)
	a.rows[y].add(x)
	a.pairs++
	return true
}

// each hands see the partners of segment x from the lowest above from
// (-1: all), ascending.
func (a *apartSet) each(x, from int, see func(o int)) {
	if x >= len(a.rows) {
		return
	}
	r := &a.rows[x]
	if r.bits == nil {
		k, _ := slices.BinarySearch(r.list, int32(from+1))
		for _, o := range r.list[k:] {
			see(int(o))
		}
		return
	}
	lo := from + 1
	for w := lo >> 6; w < len(r.bits); w++ {
		b := r.bits[w]
		if w == lo>>6 {
			b &^= 1<<(lo&63) - 1
		}
		for b != 0 {
			see(w<<6 | bits.TrailingZeros64(b))
			b &= b - 1
		}
	}
}

// bytes is the memory the pairs take.
func (a *apartSet) bytes() int {
	n := cap(a.rows) * int(unsafe.Sizeof(apartRow{}))
	for _, r := range a.rows {
		n += cap(r.list)*4 + cap(r.bits)*8
	}
	return n
}

// eachPair hands see every pair, x < y, in order of x, then y.
func (a *apartSet) eachPair(see func(x, y int)) {
	for x := range a.rows {
		a.each(x, x, func(y int) { see(x, y) })
	}
}
