package categories

// blockList is the trace's blocks as the Builder and the Result keep
// them, in the order they were born: 6 bytes a block (rec), and beside
// them what does not fit, by the block's index. Their addresses are not
// kept (Result.Lookup finds the blocks live before the trace by theirs);
// their alloc's event and stack are kept beside them (side), and their
// category, phase and rule once classified (Result.cls).
type blockList struct {
	recs  chunked
	base  []int32             // each group's first Born, bornGroup blocks a group
	group int32               // the last group's first Born, while blocks are added
	tail  *[]rec              // the last chunk of recs, while blocks are added
	room  int                 // how many more blocks addNear may append to tail
	sizes []uint64            // the sizes the blocks have, which rec.size indexes
	index map[uint64]uint16   // size → its index in sizes, while blocks are added
	cache [sizeCache]sizeSlot // recent sizes and their index
	odd   map[int]uint64      // sizes of blocks past the first 65535 sizes
	far   map[int]int32       // Born of blocks too far from their group's first
	late  map[int]int32       // Freed of blocks too long-lived for rec.life
}

// rec is one block: its Born as an offset in its group, its Freed as its
// lifetime, and its size as its index among the sizes (a program
// allocates a few sizes over and over).
type rec struct {
	off  uint16 // Born less its group's first Born; bornFar: see far
	life uint16 // Freed less Born; lifeEnd: never freed; lifeFar: see late
	size uint16 // the index of its size in sizes; oddSize: see odd
}

// sizeSlot is an entry of blockList.cache, which saves most blocks the
// map lookup of their size's index: a size and its index + 1 (0: empty).
type sizeSlot struct {
	size uint64
	idx  uint32
}

// blockList.cache's entries: a Fibonacci hash of a size picks its slot.
// A trace has a few dozen sizes, a hundred or two: of 256 slots, enough
// shared one that 1 block in 25 missed (a map lookup); of 1024, 1 in 500.
const (
	sizeCacheBits = 10
	sizeCache     = 1 << sizeCacheBits
)

const (
	bornGroupBits = 12 // bornGroup = 4096 blocks: a few thousand positions apart
	bornFar       = 0xffff
	lifeEnd       = 0xffff // Freed is the end of the trace (Result.Positions)
	lifeFar       = 0xfffe
	oddSize       = 0xffff
)

// addNear is add's common case, small enough to inline: a block of its
// last group, of a size in the cache, appended to the last chunk while
// it has room. It says whether it took the block.
func (l *blockList) addNear(born int32, n uint64) bool {
	s := &l.cache[n*0x9E3779B97F4A7C15>>(64-sizeCacheBits)]
	d := uint32(born - l.group)
	if l.room == 0 || d >= bornFar || s.size != n || s.idx == 0 {
		return false
	}
	*l.tail = append(*l.tail, rec{off: uint16(d), life: lifeEnd, size: uint16(s.idx - 1)})
	l.recs.n++
	l.room--
	return true
}

// add appends a block born at born (never before the last one) of size
// n (as keptSize keeps it). It lives to the end until setFreed.
func (l *blockList) add(born int32, n uint64) {
	i := l.recs.n
	if i&(1<<bornGroupBits-1) == 0 {
		l.base = append(l.base, born)
		l.group = born
	}
	c := rec{life: lifeEnd}
	if d := born - l.group; d >= 0 && d < bornFar {
		c.off = uint16(d)
	} else {
		c.off = bornFar
		if l.far == nil {
			l.far = map[int]int32{}
		}
		l.far[i] = born
	}
	if s := &l.cache[n*0x9E3779B97F4A7C15>>(64-sizeCacheBits)]; s.idx != 0 && s.size == n {
		c.size = uint16(s.idx - 1) // sizeIndex's common case, inlined
	} else if c.size = l.sizeIndex(n); c.size == oddSize {
		if l.odd == nil {
			l.odd = map[int]uint64{}
		}
		l.odd[i] = keptSize(n)
	}
	// appended in place while the last chunk has room (a call for it, or
	// for a size in the cache, cost each block more than the rest of add)
	if k := len(l.recs.chunks) - 1; k >= 0 && len(l.recs.chunks[k]) < cap(l.recs.chunks[k]) {
		ch := &l.recs.chunks[k]
		*ch = append(*ch, c)
		l.recs.n++
	} else {
		l.recs.grow(c)
	}
	// addNear's room: to the end of the last chunk's capacity or of the
	// group, whichever comes first (a chunk holds whole groups)
	l.tail = &l.recs.chunks[len(l.recs.chunks)-1]
	l.room = min(cap(*l.tail)-len(*l.tail), -l.recs.n&(1<<bornGroupBits-1))
}

// sizeIndex is the index of size n (as keptSize keeps it) in sizes,
// which it adds if new; oddSize when sizes holds all it may. The cache
// holds n as given: a hit costs no keptSize.
func (l *blockList) sizeIndex(given uint64) uint16 {
	s := &l.cache[given*0x9E3779B97F4A7C15>>(64-sizeCacheBits)]
	if s.idx != 0 && s.size == given {
		return uint16(s.idx - 1)
	}
	n := keptSize(given)
	k, ok := l.index[n]
	if !ok {
		if len(l.sizes) == oddSize {
			return oddSize
		}
		if l.index == nil {
			l.index = map[uint64]uint16{}
		}
		k = uint16(len(l.sizes))
		l.sizes = append(l.sizes, n)
		l.index[n] = k
	}
	*s = sizeSlot{given, uint32(k) + 1}
	return k
}

// done drops what only adding blocks needs.
func (l *blockList) done() {
	l.index, l.cache, l.tail, l.room = nil, [sizeCache]sizeSlot{}, nil, 0
}

// setLife is setFreed's common case, small enough to inline: a block
// whose Born and lifetime its rec holds. It says whether it set it.
func (l *blockList) setLife(i int, freed int32) bool {
	c := l.recs.at(i)
	d := uint32(freed - l.base[i>>bornGroupBits] - int32(c.off))
	if c.off == bornFar || d >= lifeFar {
		return false
	}
	c.life = uint16(d)
	return true
}

// setFreed sets block i's Freed.
func (l *blockList) setFreed(i int, freed int32) {
	c := l.recs.at(i)
	if d := freed - l.bornOf(i, c); d >= 0 && d < lifeFar {
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
func (l *blockList) born(i int) int32 { return l.bornOf(i, l.recs.at(i)) }

// bornOf is block i's Born, c its record.
func (l *blockList) bornOf(i int, c *rec) int32 {
	if c.off != bornFar {
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
	if c := l.recs.at(i); c.size != oddSize {
		return l.sizes[c.size]
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
	if c.size != oddSize {
		b.size = l.sizes[c.size]
	} else {
		b.size = l.odd[i]
	}
}

// classes is each born block's category, phase and rule (packCls): a
// byte a block, the index of its value among the values the trace's
// blocks have (a few dozen: a rule decides the category, mostly); two
// bytes a block, the value itself, once more than 256 values show.
type classes struct {
	idx    []uint8
	wide   []uint16 // nil until more than 256 values
	values []uint16 // the values idx indexes; values[0] is 0, unclassified
	of     *[1 << 13]uint16
}

// newClasses gives n blocks the value 0.
func newClasses(n int) classes {
	return classes{idx: make([]uint8, n), values: []uint16{0}, of: &[1 << 13]uint16{0: 1}}
}

// get is block i's value.
func (c *classes) get(i int) uint16 {
	if c.wide != nil {
		return c.wide[i]
	}
	return c.values[c.idx[i]]
}

// setFrom sets the value of every block from block i on.
func (c *classes) setFrom(i int, v uint16) {
	n := len(c.idx)
	if c.wide != nil {
		n = len(c.wide)
	}
	if i >= n {
		return
	}
	c.set(i, v) // adds v to values, or makes them wide
	if c.wide != nil {
		for j := i + 1; j < n; j++ {
			c.wide[j] = v
		}
		return
	}
	k := c.idx[i]
	for j := i + 1; j < n; j++ {
		c.idx[j] = k
	}
}

// set sets block i's value.
func (c *classes) set(i int, v uint16) {
	if c.wide != nil {
		c.wide[i] = v
		return
	}
	k := c.of[v] // its index + 1; 0: none yet
	if k == 0 {
		if len(c.values) == 256 {
			c.wide = make([]uint16, len(c.idx))
			for j, x := range c.idx {
				c.wide[j] = c.values[x]
			}
			c.idx, c.of = nil, nil
			c.wide[i] = v
			return
		}
		c.values = append(c.values, v)
		k = uint16(len(c.values))
		c.of[v] = k
	}
	c.idx[i] = uint8(k - 1)
}
