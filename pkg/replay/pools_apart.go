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
	lists [][]int32  // the partners of rows that outgrew a row, ascending
	dense [][]uint64 // the bitsets of the rows that are one
	pairs int        // distinct pairs
	found int        // pairs added, again or not
}

// apartRow is one segment's partners in 8 bytes: a trace has many
// segments, and most have two partners or fewer, held in the row (each
// partner + 1, ascending; 0: none). A row of more holds the index k of
// its list in apartSet.lists as {^k, 0}, or of its bitset in
// apartSet.dense as {0, ^k}.
type apartRow [2]int32

// denseAt: a list longer than this many entries per 64 segments of its
// range becomes a bitset (8 bytes per 64 segments against 4 per entry).
const denseAt = 2

// list is segment x's list of partners, nil while they are in its row
// or a bitset.
func (a *apartSet) list(x int) []int32 {
	if x < len(a.rows) && a.rows[x][0] < 0 {
		return a.lists[^a.rows[x][0]]
	}
	return nil
}

// bits is segment x's bitset of partners, nil while it has none.
func (a *apartSet) bits(x int) []uint64 {
	if x < len(a.rows) && a.rows[x][1] < 0 {
		return a.dense[^a.rows[x][1]]
	}
	return nil
}

func (a *apartSet) has(x, o int) bool {
	r := a.rows[x]
	switch {
	case r[1] < 0:
		b := a.dense[^r[1]]
		return o>>6 < len(b) && b[o>>6]&(1<<(o&63)) != 0
	case r[0] < 0:
		_, ok := slices.BinarySearch(a.lists[^r[0]], int32(o))
		return ok
	}
	return r[0] == int32(o)+1 || r[1] == int32(o)+1
}

// put puts o in row x, which does not hold it.
func (a *apartSet) put(x, o int) {
	r := &a.rows[x]
	switch {
	case r[1] < 0:
		b := a.dense[^r[1]]
		if w := o >> 6; w >= len(b) {
			b = append(b, make([]uint64, w+1-len(b))...)
			a.dense[^r[1]] = b
		}
		b[o>>6] |= 1 << (o & 63)
		return
	case r[0] == 0:
		r[0] = int32(o) + 1
		return
	case r[0] > 0 && r[1] == 0:
		if p := int32(o) + 1; p < r[0] {
			r[0], r[1] = p, r[0]
		} else {
			r[1] = p
		}
		return
	case r[0] > 0: // a third: the row becomes a list
		l := []int32{r[0] - 1, r[1] - 1}
		k, _ := slices.BinarySearch(l, int32(o))
		a.lists = append(a.lists, slices.Insert(l, k, int32(o)))
		*r = apartRow{^int32(len(a.lists) - 1), 0}
		return
	}
	l := a.lists[^r[0]]
	k, _ := slices.BinarySearch(l, int32(o))
	l = slices.Insert(l, k, int32(o))
	a.lists[^r[0]] = l
	span := int(l[len(l)-1])>>6 + 1
	if len(l) <= 8 || len(l) <= denseAt*span {
		return
	}
	b := make([]uint64, span, span+span/4)
	for _, y := range l {
		b[y>>6] |= 1 << (y & 63)
	}
	a.lists[^r[0]] = nil
	*r = apartRow{0, ^int32(len(a.dense))}
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
	if r[0] > 0 {
		for _, p := range r {
			if p > 0 && int(p-1) > from {
				see(int(p - 1))
			}
		}
		return
	}
	set := a.bits(x)
	if set == nil {
		l := a.list(x)
		k, _ := slices.BinarySearch(l, int32(from+1))
		for _, o := range l[k:] {
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
	n := cap(a.rows)*int(unsafe.Sizeof(apartRow{})) + cap(a.lists)*int(unsafe.Sizeof([]int32{})) + cap(a.dense)*int(unsafe.Sizeof([]uint64{}))
	for _, l := range a.lists {
		n += cap(l) * 4
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
