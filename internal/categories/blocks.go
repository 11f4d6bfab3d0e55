package categories

// blockList is the trace's blocks as the Builder and the Result keep
// them, in the order they were born: 8 bytes a block (rec), and beside
// them what does not fit, by the block's index. Their addresses are not
// kept (Result.Lookup finds the blocks live before the trace by theirs);
// their alloc's event and stack are kept beside them (side), and their
// category, phase and rule once classified (Result.cls).
type blockList struct {
	recs chunked[rec]
	base []int32        // each group's first Born, bornGroup blocks a group
	odd  map[int]uint64 // sizes of no whole units, or of 2^32-1 units or more
	far  map[int]int32  // Born of blocks too far from their group's first
	late map[int]int32  // Freed of blocks too long-lived for rec.life
}

// rec is one block: its Born as an offset in its group, its Freed as its
// lifetime, and its size in 512 B units (a trace's sizes are rounded to
// them).
type rec struct {
	off   uint16 // Born less its group's first Born; bornFar: see far
	life  uint16 // Freed less Born; lifeEnd: never freed; lifeFar: see late
	units uint32 // the size in 512 B units; oddUnits: see odd
}

const (
	bornGroupBits = 12 // bornGroup = 4096 blocks: a few thousand positions apart
	bornFar       = 0xffff
	lifeEnd       = 0xffff // Freed is the end of the trace (Result.Positions)
	lifeFar       = 0xfffe
	oddUnits      = ^uint32(0)
)

// add appends a block born at born (never before the last one) of size
// n and returns its size as kept (keptSize). It lives to the end until
// setFreed.
func (l *blockList) add(born int32, n uint64) uint64 {
	i := l.recs.n
	if i&(1<<bornGroupBits-1) == 0 {
		l.base = append(l.base, born)
	}
	c := rec{life: lifeEnd}
	if d := born - l.base[i>>bornGroupBits]; d >= 0 && d < bornFar {
		c.off = uint16(d)
	} else {
		c.off = bornFar
		if l.far == nil {
			l.far = map[int]int32{}
		}
		l.far[i] = born
	}
	n = keptSize(n)
	if n%512 == 0 && n>>9 < uint64(oddUnits) {
		c.units = uint32(n >> 9)
	} else {
		c.units = oddUnits
		if l.odd == nil {
			l.odd = map[int]uint64{}
		}
		l.odd[i] = n
	}
	l.recs.add(c)
	return n
}

// setFreed sets block i's Freed.
func (l *blockList) setFreed(i int, freed int32) {
	c := l.recs.at(i)
	if d := freed - l.born(i); d >= 0 && d < lifeFar {
		c.life = uint16(d)
		return
	}
	c.life = lifeFar
	if l.late == nil {
		l.late = map[int]int32{}
	}
	l.late[i] = freed
}

// born is block i's Born.
func (l *blockList) born(i int) int32 {
	if c := l.recs.at(i); c.off != bornFar {
		return l.base[i>>bornGroupBits] + int32(c.off)
	}
	return l.far[i]
}

// freed is block i's Freed, end when it lives to the end.
func (l *blockList) freed(i int, end int32) int32 {
	switch c := l.recs.at(i); c.life {
	case lifeEnd:
		return end
	case lifeFar:
		return l.late[i]
	default:
		return l.born(i) + int32(c.life)
	}
}

// size is block i's size.
func (l *blockList) size(i int) uint64 {
	if c := l.recs.at(i); c.units != oddUnits {
		return uint64(c.units) << 9
	}
	return l.odd[i]
}

// block is block i, whose rec is c, as a Block (not yet classified).
func (l *blockList) block(i int, c *rec, end int32) Block {
	var b Block
	l.fill(&b, i, c, end)
	return b
}

// fill sets b's Born, Freed and size to block i's, whose rec is c, one
// field at a time: a Block built apart and copied whole costs hot loops
// a stall per block (the copy's wide loads wait on the narrow stores).
func (l *blockList) fill(b *Block, i int, c *rec, end int32) {
	born := l.base[i>>bornGroupBits] + int32(c.off)
	if c.off == bornFar {
		born = l.far[i]
	}
	b.Born = born
	switch c.life {
	case lifeEnd:
		b.Freed = end
	case lifeFar:
		b.Freed = l.late[i]
	default:
		b.Freed = born + int32(c.life)
	}
	if c.units != oddUnits {
		b.size = uint64(c.units) << 9
	} else {
		b.size = l.odd[i]
	}
}
