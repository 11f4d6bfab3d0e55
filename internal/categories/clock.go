package categories

import "encoding/binary"

// clock is the time of each position of a Builder, in a byte or two a
// position: each time is kept as its difference from the one before, a
// signed varint (one byte below 64 µs, two below 8 ms), and every
// clockGroup positions a mark keeps the group's first time and where its
// differences begin, so that at decodes at most a group's. The
// differences fill slabs of clockSlab bytes, never copied as they grow;
// a group's never straddle two.
type clock struct {
	first []int64  // each group's first time
	off   []uint32 // where each group's differences begin: slab<<16 | offset
	slabs [][]byte
	last  int64 // the time of position n-1
	n     int
}

const (
	clockGroupBits = 6 // clockGroup = 64 positions a mark
	clockGroup     = 1 << clockGroupBits
	clockSlab      = 1 << 16
	// the most bytes a group's differences take
	clockGroupMax = (clockGroup - 1) * binary.MaxVarintLen64
)

func (c *clock) add(t int64) {
	if c.n&(clockGroup-1) == 0 {
		k := len(c.slabs) - 1
		if k < 0 || clockSlab-len(c.slabs[k]) < clockGroupMax {
			c.slabs = append(c.slabs, make([]byte, 0, min(clockSlab, max(2*c.n, 256))))
			k++
		}
		c.first = append(c.first, t)
		c.off = append(c.off, uint32(k)<<16|uint32(len(c.slabs[k])))
	} else if d := t - c.last; d >= -64 && d < 64 { // one byte, as binary.AppendVarint writes it
		k := len(c.slabs) - 1
		c.slabs[k] = append(c.slabs[k], byte(d<<1^d>>63))
	} else {
		k := len(c.slabs) - 1
		c.slabs[k] = binary.AppendVarint(c.slabs[k], d)
	}
	c.last = t
	c.n++
}

// at is the time of position i (i < n).
func (c *clock) at(i int) int64 {
	g := i >> clockGroupBits
	t, o := c.first[g], c.off[g]
	b := c.slabs[o>>16][o&(clockSlab-1):]
	for range i & (clockGroup - 1) {
		d, k := binary.Varint(b)
		t += d
		b = b[k:]
	}
	return t
}
