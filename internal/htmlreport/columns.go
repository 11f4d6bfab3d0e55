package htmlreport

import (
	"bytes"
	"encoding/binary"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
)

// column is one packed integer column. Past spillAt bytes, what it holds
// is deflated into a part of zs (see deflateColumns), so that a big
// trace's columns take their deflated size in memory; b then keeps the
// last window of what was deflated (its first hist bytes) for the next
// part to refer back into.
type column struct {
	b    []byte
	hist int
	lim  int // add's one-byte values go straight in while len(b) < lim
	last int64
	n    int
	size int      // bytes deflated into zs
	zs   [][]byte // the deflated parts, each its size
	// level is the column's deflate level when it spills, 0 for
	// levelNoisy (see levelPattern); a small explorer's columns, none
	// spilled, deflate as one stream at level.
	level int
}

// spillAt is how many new bytes a column holds before deflating them
// (a variable for the tests). Parts of a column each cost a few dozen
// bytes of block headers: at this size the page grows by 0.1%.
var spillAt = 256 << 10

// level is the columns' deflate level, of klauspost/compress/flate,
// whose levels up to 6 are hash encoders of few probes rather than the
// standard library's chains of matches. At 4, scripts/gen_trace.py's 1M
// events make a page of 2,321,364 bytes (at 5: 2,173,272, and replay
// --html takes 1% more instructions, 1.6% more CPU; at 6: 15% slower
// again; at 3: 2,458,084 bytes, past the 2.4 MB the page may take).
const level = 4

// window is how far back a part of a column may refer, into the column's
// bytes before it: half of deflate's 32 KB. The compressor takes those
// bytes as its dictionary, which it deflates again, unwritten, before
// each part (256 KB), so that the dictionary's length is a share of the
// columns' deflating: at 16 KB, replay --html of scripts/gen_trace.py's
// 1M events takes 0.5% fewer instructions than at 32 KB (its deflating
// 5% fewer), for a page 0.2% larger.
const window = 16 << 10

// A big explorer's columns, spilled, deflate each at one of two levels,
// the one that takes the fewer instructions for its bytes: most columns,
// of values without much pattern (addresses, sizes, positions in the
// list), shrink little more at 4 than at 2 and take 20-50% longer; those
// of repeated patterns (block states and segments, the ops' counts of
// blocks, times, sizes) shrink by up to a fifth more at 5 for a few
// percent more. At scripts/gen_trace.py's 1M events, the columns
// deflated one by one as the packer does take 326M instructions all at
// 4, 289M at these levels, in 4 KB fewer bytes (levels 2 to 5 chosen
// column by column: 282M; two levels keep the compressors' memory down).
const (
	levelNoisy   = 2 // every column but levelPattern's
	levelPattern = 5 // bseg, bstate, insdel, size, time
)

// columnLevels says the columns deflate at those levels (the tests set it
// false, to compare the parts with one stream at level).
var columnLevels = true

// deflaters keeps the compressors of each level, free for a part to take
// one: one per part being deflated at the time, not one per column (each
// holds up to a few MB of tables). Not a sync.Pool, which drops what it
// holds at each collection: a big trace's packing would make new ones
// over and over, a few MB of garbage each time (6 MB more RSS at a
// million events).
var deflaters struct {
	sync.Mutex
	free [flate.BestCompression + 1][]*deflater
}

// deflaterAt takes a compressor of level l, levelNoisy when 0; give it
// back with put.
func deflaterAt(l int) *deflater {
	if l == 0 {
		l = levelNoisy
	}
	deflaters.Lock()
	defer deflaters.Unlock()
	if f := deflaters.free[l]; len(f) > 0 {
		deflaters.free[l] = f[:len(f)-1]
		return f[len(f)-1]
	}
	d := &deflater{level: l}
	d.w, _ = flate.NewWriter(&d.out, l) // the level is valid
	return d
}

func (d *deflater) put() {
	deflaters.Lock()
	deflaters.free[d.level] = append(deflaters.free[d.level], d)
	deflaters.Unlock()
}

type deflater struct {
	level int
	w     *flate.Writer
	out   switchWriter
	buf   bytes.Buffer // a part deflated, before it is copied to its size
}

// switchWriter writes to w, which may change between a flush and the next
// write.
type switchWriter struct{ w io.Writer }

func (s *switchWriter) Write(b []byte) (int, error) { return s.w.Write(b) }

// part appends to z the deflated part b of a column, in blocks ended by
// a sync flush, referring back into dict, the column's bytes just before
// b (what the page has inflated just before b): the compressor takes
// dict as its dictionary, so that b's matches reach back into it as they
// would have in one stream.
func (d *deflater) part(z *bytes.Buffer, dict, b []byte) {
	d.out.w = z
	d.w.ResetDict(&d.out, dict) // matches the dict's bytes, writes nothing
	d.w.Write(b)
	d.w.Flush()
	d.out.w = nil // no reference to z left in the pool
}

func (c *column) spill() {
	d := deflaterAt(c.level)
	d.buf.Reset()
	d.part(&d.buf, c.b[:c.hist], c.b[c.hist:])
	c.zs = append(c.zs, bytes.Clone(d.buf.Bytes()))
	d.put()
	c.size += len(c.b) - c.hist
	c.hist = min(window, len(c.b))
	if n := window + spillAt + binary.MaxVarintLen64; cap(c.b) < n { // no room left to grow into
		c.b = append(make([]byte, 0, n), c.b[len(c.b)-c.hist:]...)
	} else {
		c.b = c.b[:copy(c.b, c.b[len(c.b)-c.hist:])]
	}
	c.setLim()
}

// setLim sets lim once b's room or hist changed: below it b has room for
// a varint, and no spill is due after one.
func (c *column) setLim() {
	c.lim = min(cap(c.b)-binary.MaxVarintLen64+1, c.hist+spillAt-binary.MaxVarintLen64)
}

// grow makes room in b: 4 KB at first, then all a column holds between
// spills, rather than append's doubling (the copies it leaves behind
// would be 20 MB at a million events, each a column's size); it doubles
// only where spills are far apart (tests: one stream).
func (c *column) grow() {
	n, full := max(4<<10, 2*cap(c.b)), window+spillAt+binary.MaxVarintLen64
	if cap(c.b) >= 4<<10 && full <= 1<<20 {
		n = full
	}
	c.b = append(make([]byte, 0, n), c.b...)
	c.setLim()
}

// raw is how many bytes the column holds, deflated or not.
func (c *column) raw() int { return c.size + len(c.b) - c.hist }

// add appends v, as the difference from the last value when delta.
func (c *column) add(v int64, delta bool) {
	if u, ok := c.try(v, delta); !ok {
		c.put(u)
	}
}

// try is add for a value of one byte, most of them, below lim (room for
// any value, and no spill due): one store. Otherwise it returns the
// varint for put to write. add, with its call, is past what Go inlines;
// try alone is not, so the packer's callers for every allocation, op and
// block write add's body where they add (2% fewer instructions in
// replay --html of a million events).
func (c *column) try(v int64, delta bool) (uint64, bool) {
	d := v
	if delta {
		d, c.last = v-c.last, v
	}
	u := uint64(d<<1) ^ uint64(d>>63)
	n := len(c.b)
	if u >= 0x80 || n >= c.lim {
		return u, false
	}
	c.b = c.b[:n+1]
	c.b[n] = byte(u)
	c.n++
	return 0, true
}

// put appends the varint u: below lim, with no room to make and no
// spill to check.
func (c *column) put(u uint64) {
	n := len(c.b)
	if n >= c.lim {
		c.putAtLim(u)
		return
	}
	// the values put here take two bytes to four, mostly (those of one
	// byte, try's): written straight, with no loop and, b's length
	// known, no bounds checks
	b := c.b[n : n+binary.MaxVarintLen64]
	switch {
	case u < 0x80:
		b[0] = byte(u)
		n++
	case u < 1<<14:
		b[0], b[1] = byte(u)|0x80, byte(u>>7)
		n += 2
	case u < 1<<21:
		b[0], b[1], b[2] = byte(u)|0x80, byte(u>>7)|0x80, byte(u>>14)
		n += 3
	case u < 1<<28:
		b[0], b[1], b[2], b[3] = byte(u)|0x80, byte(u>>7)|0x80, byte(u>>14)|0x80, byte(u>>21)
		n += 4
	default:
		n += binary.PutUvarint(b, u)
	}
	// c.b resliced in place: only its length is stored, where b[:k]
	// stored would be a pointer's store, through the write barrier
	// while the collector marks (for each of millions of values)
	c.b = c.b[:n]
	c.n++
}

// putAtLim is put from lim on: it makes room for the varint, writes it,
// and spills once the column holds spillAt new bytes.
func (c *column) putAtLim(u uint64) {
	if len(c.b)+binary.MaxVarintLen64 > cap(c.b) {
		c.grow()
	}
	c.b = binary.AppendUvarint(c.b, u)
	c.n++
	if len(c.b)-c.hist >= spillAt {
		c.spill()
	}
}

// deflateColumns deflates the columns one after the other as one stream,
// in pieces. Columns that grew past spillAt were deflated as they grew,
// part by part, each part ended by a sync flush: byte-aligned blocks that
// refer back at most a window, into their own column, so that one after
// the other they are one deflate stream of the columns' bytes. Small
// explorers, none spilled, deflate all at once.
func deflateColumns(cols []*column) [][]byte {
	var z bytes.Buffer
	spilled := false
	for _, c := range cols {
		spilled = spilled || c.zs != nil
	}
	d := deflaterAt(levelNoisy)
	if !spilled {
		d.put()
		d = deflaterAt(level)
	}
	defer d.put()
	defer func() { d.out.w = nil }()
	if !spilled {
		d.out.w = &z
		d.w.Reset(&d.out)
		for _, c := range cols {
			d.w.Write(c.b)
		}
		d.w.Close()
		return [][]byte{z.Bytes()}
	}
	// the parts as they are; the columns' last parts and the final block
	// into z, placed once z is complete
	var pieces [][]byte
	var tails [][2]int // in z, after pieces[k] for k < len(pieces)
	var at []int
	for _, c := range cols {
		pieces = append(pieces, c.zs...)
		c.zs = nil
		start := z.Len()
		dc := deflaterAt(c.level)
		dc.part(&z, c.b[:c.hist], c.b[c.hist:])
		dc.put()
		c.b = nil // for the preview's memory
		tails, at = append(tails, [2]int{start, z.Len()}), append(at, len(pieces))
	}
	start := z.Len()
	d.out.w = &z
	d.w.Reset(&d.out)
	d.w.Close() // the final, empty block
	tails, at = append(tails, [2]int{start, z.Len()}), append(at, len(pieces))
	out := make([][]byte, 0, len(pieces)+len(tails))
	k := 0
	for i, t := range tails {
		for ; k < at[i]; k++ {
			out = append(out, pieces[k])
		}
		out = append(out, z.Bytes()[t[0]:t[1]])
	}
	return out
}
