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
	dense [][]uint64 // the bitsets of the rows that are
	pairs int        // distinct pairs
	found int        // pairs added, again or not
}

// apartRow is one segment's partners, ascending, while it has few; once
// a bitset is smaller, the row holds its index k in apartSet.dense alone,
// as ^k (a partner is never negative). A trace has many segments, and
// most have few partners or none: a row takes a slice header.
type apartRow []int32

// denseAt: a list longer than this many entries per 64 segments of its
// range becomes a bitset (8 bytes per 64 segments against 4 per entry).
const denseAt = 2

// bits is the row's bitset, nil while it is a list.
func (a *apartSet) bits(r apartRow) []uint64 {
	if len(r) == 1 && r[0] < 0 {
		return a.dense[^r[0]]
	}
	return nil
}

func (a *apartSet) has(x, o int) bool {
	r := a.rows[x]
	if b := a.bits(r); b != nil {
		return o>>6 < len(b) && b[o>>6]&(1<<(o&63)) != 0
	}
	_, ok := slices.BinarySearch(r, int32(o))
	return ok
}

// put puts o in row x, which does not hold it.
func (a *apartSet) put(x, o int) {
	r := a.rows[x]
	if b := a.bits(r); b != nil {
		if w := o >> 6; w >= len(b) {
			b = append(b, make([]uint64, w+1-len(b))...)
			a.dense[^r[0]] = b
		}
		b[o>>6] |= 1 << (o & 63)
		return
	}
	k, _ := slices.BinarySearch(r, int32(o))
	r = slices.Insert(r, k, int32(o))
	a.rows[x] = r
	span := int(r[len(r)-1])>>6 + 1
	if len(r) <= 8 || len(r) <= denseAt*span {
		return
	}
	b := make([]uint64, span, span+span/4)
	for _, y := range r {
		b[y>>6] |= 1 << (y & 63)
	}
	a.rows[x] = apartRow{^int32(len(a.dense))}
	a.dense = append(a.dense, b)
}

// add notes that segments x and y (x != y) are in different pools, and
// says whether the pair is new.
func (a *apartSet) add(x, y int) bool {
	a.found++
	if n := max(x, y) + 1; n > len(a.rows) {
		a.rows = append(a.rows, make([]apartRow, n-len(a.rows))...)
	}
	if a.has(x, y) {
		return false
	}
	a.put(x, y)
	a.put(y, x)
	a.pairs++
	return true
}

// each hands see the partners of segment x from the lowest above from
// (-1: all), ascending.
func (a *apartSet) each(x, from int, see func(o int)) {
	if x >= len(a.rows) {
		return
	}
	r := a.rows[x]
	set := a.bits(r)
	if set == nil {
		k, _ := slices.BinarySearch(r, int32(from+1))
		for _, o := range r[k:] {
			see(int(o))
		}
		return
	}
	lo := from + 1
	for w := lo >> 6; w < len(set); w++ {
		b := set[w]
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
	n := cap(a.rows)*int(unsafe.Sizeof(apartRow{})) + cap(a.dense)*int(unsafe.Sizeof([]uint64{}))
	for _, r := range a.rows {
		n += cap(r) * 4
	}
	for _, b := range a.dense {
		n += cap(b) * 8
	}
	return n
}

// eachPair hands see every pair, x < y, in order of x, then y.
func (a *apartSet) eachPair(see func(x, y int)) {
	for x := range a.rows {
		a.each(x, x, func(y int) { see(x, y) })
	}
}
