package htmlreport

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"math"
	"slices"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/pkg/alloc"
)

// DefaultMaxBands is how many allocations the explorer draws as bands of
// their own unless told otherwise; beyond it the largest keep theirs and
// the rest are drawn as one aggregate.
const DefaultMaxBands = 2_000_000

// The explorer's data is packed for size: each integer column is delta- or
// plain-coded as zigzag LEB128 varints, then deflated and base64; stacks
// and frames are written once and referred to by index. The page decodes
// the columns in a Web Worker (explorer.js) and meanwhile draws its first
// view from a small preview and segment map (explorer_first.go).

type exDevice struct {
	Device     int       `json:"device"`
	Ops        int       `json:"ops"`
	Peak       int       `json:"peak"`
	OOM        int       `json:"oom"`
	OOMSize    uint64    `json:"oomSize"`
	OOMRounded uint64    `json:"oomRounded"`
	Verdict    string    `json:"verdict"`
	Bands      int       `json:"bands"`      // allocations drawn as bands
	Aggregated int       `json:"aggregated"` // allocations drawn as the aggregate
	Stacks     [][]int32 `json:"stacks"`
	Frames     []string  `json:"frames"`
	User       []bool    `json:"user"`
	Spans      [][3]any  `json:"spans"` // start, end, name
	Keys       []int     `json:"keys"`  // the ops after which the key lists hold
	Unit       uint64    `json:"unit"`  // addresses and block and segment sizes are in these units
	// Cats name the bands' categories (column cat: 1 + index, 0 none);
	// CatOps and CatBytes sample the bytes of each category over the ops.
	Cats     []string   `json:"cats"`
	CatOps   []int      `json:"catOps"`
	CatBytes [][]uint64 `json:"catBytes"`
	// Cols places each column in the inflated bin: its offset, length in
	// bytes and number of values.
	Cols map[string][3]int `json:"cols"`
	// bin is the columns, deflated, in pieces one after the other: written
	// in base64 apart from the rest, so that the page parses only the
	// small part before drawing.
	bin [][]byte
	// Preview is the first view of the bands (preview), its runs in
	// base64; First the segment map where the scrubber starts.
	Preview  string     `json:"preview"`
	PreviewW int        `json:"previewW"`
	PreviewH int        `json:"previewH"`
	First    exFirstMap `json:"first"`
}

// explorerData packs the explorers for the page: their figures ("null"
// when none), and apart from them their columns, each device's bin in
// pieces (writeBins writes them). exs are whole explorers, packed here;
// packed are sinks of NewExplorerPacker that packed theirs as the
// pipeline made them.
func explorerData(exs []*figures.Explorer, packed []figures.ExplorerSink, maxBands int) (meta template.JS, bins [][][]byte, err error) {
	if len(exs) == 0 && len(packed) == 0 {
		return "null", nil, nil
	}
	var out []exDevice
	for _, e := range exs {
		p, err := packExplorer(e, maxBands)
		if err != nil {
			return "", nil, err
		}
		out = append(out, p.d)
		bins = append(bins, p.d.bin)
	}
	for _, s := range packed {
		p, ok := s.(*packer)
		if !ok || !p.done {
			return "", nil, errors.New("htmlreport: an explorer not packed by NewExplorerPacker")
		}
		out = append(out, p.d)
		bins = append(bins, p.d.bin)
	}
	// json.Marshal writes <, > and & as \u003c..., so no "</script>" can
	// end the script element early.
	m, err := json.Marshal(out)
	if err != nil {
		return "", nil, err
	}
	return template.JS(m), bins, nil
}

// writeBins writes the devices' bins as a JSON list of base64 strings
// (which need no escaping), each straight from its pieces: no copy of
// them, some MB at a million events.
func writeBins(w io.Writer, bs [][][]byte) error {
	ew := &errWriter{w: w}
	ew.Write([]byte{'['})
	for i, b := range bs {
		if i > 0 {
			ew.Write([]byte{','})
		}
		ew.Write([]byte{'"'})
		enc := base64.NewEncoder(base64.StdEncoding, ew)
		for _, c := range b {
			enc.Write(c)
		}
		enc.Close()
		ew.Write([]byte{'"'})
	}
	ew.Write([]byte{']'})
	return ew.err
}

// errWriter writes to w until a write fails, then keeps that error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
	return len(b), e.err
}

// NewExplorerPacker makes the sinks that pack each device's explorer as
// the pipeline steps through it (see figures.ExplorerSink), keeping per
// allocation a few figures and per op nothing: the columns are deflated
// as they grow. maxBands is as Extra.MaxBands.
func NewExplorerPacker(maxBands int) figures.ExplorerPacker {
	return func() figures.ExplorerSink { return &packer{maxBands: maxBands} }
}

// packExplorer packs a whole explorer: it hands e to a packer as the
// pipeline would have, op by op.
func packExplorer(e *figures.Explorer, maxBands int) (*packer, error) {
	p := &packer{maxBands: maxBands}
	n := int32(e.Ops)
	for {
		head := *e
		head.Allocs, head.Changes, head.Keys = nil, nil, nil
		p.Start(figures.ExplorerStart{Head: &head, Timed: e.TimeUS != nil, Allocs: len(e.Allocs),
			Sizes: func(yield func(uint64)) error {
				for _, a := range e.Allocs {
					yield(a.Size)
				}
				return nil
			}})
		// the allocations by the op that made them, ended them and released them
		byEnd := make([][]int32, e.Ops+1)
		byRel := make([][]int32, e.Ops+1)
		for k, a := range e.Allocs {
			if a.End < n {
				byEnd[a.End] = append(byEnd[a.End], int32(k))
			}
			if a.Released < n {
				byRel[a.Released] = append(byRel[a.Released], int32(k))
			}
		}
		k, key := 0, 0
		for i := range e.Ops {
			for ; k < len(e.Allocs) && int(e.Allocs[k].Start) <= i; k++ {
				a := e.Allocs[k]
				a.End, a.Released = n, n
				p.Alloc(int32(k), &a)
			}
			for _, j := range byEnd[i] {
				p.Freed(j, int32(i), e.Allocs[j].Size)
			}
			for _, j := range byRel[i] {
				p.Released(j, int32(i))
			}
			var t int64
			if e.TimeUS != nil {
				t = e.TimeUS[i]
			}
			p.Op(i, t, e.Changes[i])
			if i+1 == firstOp(e) {
				p.First(i+1, blocksAt(e, i+1))
			}
			for ; key < len(e.Keys) && e.Keys[key].Op <= i+1; key++ {
				p.Key(e.Keys[key].Op, e.Keys[key].Blocks)
			}
		}
		err := p.Finish()
		if err == figures.ErrExplorerAgain {
			continue
		}
		return p, err
	}
}

// packer packs one device's explorer as it is made (figures.ExplorerSink).
type packer struct {
	maxBands int
	unit1    bool // a block size or address not a multiple of 512 was seen: the next pass writes bytes
	unitLog  uint // d.Unit is 1 << unitLog: sizes in units are shifted, not divided
	done     bool
	d        exDevice
	head     *figures.Explorer
	ops      int
	timed    bool

	// which allocations keep a band: all, or those larger than thr and
	// the first thrLeft of size thr (the largest maxBands, ties to the
	// earliest, as a stable sort by size would keep)
	all     bool
	thr     uint64
	thrLeft int
	bandOf  []int32 // allocation → band, -1 aggregated; nil when all keep one
	allocs  int32
	// per band: what the len and rel columns and the preview need
	bStart, bEnd, bRel, bStack []int32
	bSize                      []uint64

	aggOp   int64 // the aggregated bytes op's allocations made less those it ended
	aggLive int64 // the aggregated bytes live
	live    int64 // all allocations' bytes live
	maxLive int64 // the most live at any op
	// the preview's columns: each one's stretch of ops and the op of it
	// where the most bytes were live, with the aggregated bytes then
	sa, sb    []int
	best      []int
	bestTotal []int64
	bestAgg   []int64
	col0      int
	// ops before alone are in column col0 only, and none is its first:
	// an op before it compares its total with col0's best and no more
	alone int
	first bool // First came
	odd   bool // a block size or address not a multiple of 512

	c struct {
		start, len, rel, size, addr, stream, stack, agg, time, cat column
		pos, insdel, insx, bsize, bstate, bseg                     column
		klen, ksize, kstate, kseg                                  column
	}
}

func (p *packer) Start(s figures.ExplorerStart) {
	*p = packer{maxBands: p.maxBands, unit1: p.unit1, head: s.Head, ops: s.Head.Ops, timed: s.Timed}
	if p.maxBands <= 0 {
		p.maxBands = DefaultMaxBands
	}
	e := s.Head
	p.d = exDevice{Device: e.Device, Ops: e.Ops, Unit: 512}
	p.unitLog = 9
	if p.unit1 {
		p.d.Unit, p.unitLog = 1, 0
	}
	p.all = s.Allocs <= p.maxBands
	if !p.all {
		sizes := make([]uint64, 0, s.Allocs)
		_ = s.Sizes(func(v uint64) { sizes = append(sizes, v) })
		slices.SortFunc(sizes, func(a, b uint64) int { return cmp.Compare(b, a) })
		p.thr = sizes[p.maxBands-1]
		above, _ := slices.BinarySearchFunc(sizes, p.thr, func(a, t uint64) int { return cmp.Compare(t, a) })
		p.thrLeft = p.maxBands - above
		p.bandOf = make([]int32, 0, s.Allocs)
	}
	// the bands' figures at their final size: no copies left behind as
	// they grow
	nb := min(s.Allocs, p.maxBands)
	p.bStart, p.bEnd, p.bRel, p.bStack = make([]int32, 0, nb), make([]int32, 0, nb), make([]int32, 0, nb), make([]int32, 0, nb)
	p.bSize = make([]uint64, 0, nb)
	W := previewW
	p.sa, p.sb = make([]int, W), make([]int, W)
	p.best, p.bestTotal, p.bestAgg = make([]int, W), make([]int64, W), make([]int64, W)
	for c := range W {
		at := func(f float64) float64 { return 0 + f*float64(p.ops) }
		a := max(0, int(math.Floor(at(float64(c)/float64(W)))))
		b := min(p.ops, max(a+1, int(math.Floor(at(float64(c+1)/float64(W))))))
		if c == W-1 {
			b = min(p.ops, max(a+1, p.ops))
		}
		p.sa[c], p.sb[c], p.best[c] = a, b, min(a, p.ops-1)
	}
	p.d.Keys = []int{}
	c := &p.c
	for _, col := range []*column{&c.bseg, &c.bstate, &c.insdel, &c.size, &c.time} {
		col.level = levelPattern
	}
	if !columnLevels {
		for _, col := range p.columns() {
			col.c.level = level
		}
	}
}

func (p *packer) keeps(size uint64) bool {
	switch {
	case p.all || size > p.thr:
		return true
	case size == p.thr && p.thrLeft > 0:
		p.thrLeft--
		return true
	}
	return false
}

func (p *packer) Alloc(k int32, a *figures.Lifetime) {
	p.allocs++
	p.live += int64(a.Size)
	if !p.keeps(a.Size) {
		p.bandOf = append(p.bandOf, -1)
		p.d.Aggregated++
		p.aggOp += int64(a.Size)
		p.aggLive += int64(a.Size)
		return
	}
	if p.bandOf != nil {
		p.bandOf = append(p.bandOf, int32(p.d.Bands))
	}
	p.d.Bands++
	p.bStart = append(p.bStart, a.Start)
	p.bEnd = append(p.bEnd, a.End)
	p.bRel = append(p.bRel, a.Released)
	p.bSize = append(p.bSize, a.Size)
	p.bStack = append(p.bStack, a.Stack)
	c := &p.c
	if u, ok := c.start.try(int64(a.Start), true); !ok {
		c.start.put(u)
	}
	if u, ok := c.size.try(int64(a.Size), false); !ok {
		c.size.put(u)
	}
	if a.Address%512 != 0 {
		p.odd = true
	}
	if u, ok := c.addr.try(int64(a.Address>>p.unitLog), true); !ok {
		c.addr.put(u)
	}
	if u, ok := c.stream.try(int64(a.Stream), true); !ok {
		c.stream.put(u)
	}
	if u, ok := c.stack.try(int64(a.Stack), true); !ok {
		c.stack.put(u)
	}
	if p.head.Categories != nil {
		if u, ok := c.cat.try(int64(a.Category), false); !ok {
			c.cat.put(u)
		}
	}
}

// band is allocation k's band, -1 when aggregated.
func (p *packer) band(k int32) int32 {
	if p.bandOf == nil {
		return k
	}
	return p.bandOf[k]
}

func (p *packer) Freed(k, op int32, size uint64) {
	if b := p.band(k); b < 0 {
		p.aggOp -= int64(size)
		p.aggLive -= int64(size)
	} else {
		p.bEnd[b] = op
	}
	p.live -= int64(size)
}

func (p *packer) Released(k, op int32) {
	if b := p.band(k); b >= 0 {
		p.bRel[b] = op
	}
}

func (p *packer) Op(i int, t int64, ch figures.Change) {
	p.op(i, t, ch.Pos, ch.Del, len(ch.Ins))
	c := &p.c
	p.blocks(ch.Ins, false, &c.bsize, &c.bstate, &c.bseg)
}

// OpFlat is Op with the blocks as the allocator lists them
// (figures.ExplorerFlatSink): it packs each as blocks packs its record
// (figures.BlockRecOf), read once, in the loop here rather than a call
// of its own (a million ops): the records, made first, would be stored
// and read again.
func (p *packer) OpFlat(i int, t int64, pos, del int32, bs []alloc.FlatBlock, ix *figures.AllocIndex) {
	p.op(i, t, pos, del, len(bs))
	c := &p.c
	size, state, seg := &c.bsize, &c.bstate, &c.bseg
	made := int64(p.d.Bands)
	for i := range bs {
		b := &bs[i]
		if (b.Size|b.SegSize|b.Address)%512 != 0 {
			p.odd = true
		}
		sz := int64(b.Size >> p.unitLog)
		st := int64(figures.StateOf(b))
		k := int64(0)
		if st >= int64(figures.StateAllocated) {
			a := int32(-1)
			if id := b.ID; int(id) < len(ix.Dense) { // ix.Of, its common case inlined
				a = ix.Dense[id] - 1
			} else {
				a = ix.Of(id)
			}
			if a >= 0 {
				if bd := p.band(a); bd >= 0 {
					k = made - int64(bd)
					sz -= int64((p.bSize[bd] + p.d.Unit - 1) >> p.unitLog)
				}
			}
		}
		if b.SegSize != 0 { // the first block of its segment
			st |= 4
			if u, ok := seg.try(int64(b.Address>>p.unitLog), true); !ok {
				seg.put(u)
			}
			if u, ok := seg.try(int64(b.SegSize>>p.unitLog), false); !ok {
				seg.put(u)
			}
		}
		if u, ok := size.try(sz, false); !ok {
			size.put(u)
		}
		if u, ok := state.try(k<<3|st, false); !ok {
			state.put(u)
		}
	}
}

// op is Op's part before the blocks: the op's time, aggregate, preview
// sample, and where and how many blocks it replaced.
func (p *packer) op(i int, t int64, pos, del int32, nins int) {
	c := &p.c
	if p.timed {
		if u, ok := c.time.try(t, true); !ok {
			c.time.put(u)
		}
	}
	if !p.all {
		if u, ok := c.agg.try(p.aggOp, false); !ok {
			c.agg.put(u)
		}
		p.aggOp = 0
	}
	// the preview: the op of each column's stretch with the most bytes live
	total := p.live
	p.maxLive = max(p.maxLive, total)
	if i < p.alone {
		if k := p.col0; total > p.bestTotal[k] {
			p.best[k], p.bestTotal[k], p.bestAgg[k] = i, total, p.aggLive
		}
	} else {
		p.sample(i, total)
	}
	if u, ok := c.pos.try(int64(pos), true); !ok {
		c.pos.put(u)
	}
	// the blocks deleted and inserted, in one value: most ops insert one or
	// two, the rare op inserting more has the rest in column insx
	ins := int64(nins)
	if u, ok := c.insdel.try(int64(del)<<2|min(ins, 3), false); !ok {
		c.insdel.put(u)
	}
	if ins >= 3 {
		if u, ok := c.insx.try(ins-3, false); !ok {
			c.insx.put(u)
		}
	}
}

// First keeps the segment map where the scrubber starts.
func (p *packer) First(op int, blocks []figures.BlockRec) {
	p.first = true
	p.d.First = exFirstMap{Op: op, Blocks: make([][6]int64, 0, len(blocks))}
	for _, b := range blocks {
		first, seg, band := int64(0), int64(0), int64(-1)
		if b.First {
			first, seg = 1, int64(b.SegSize)
		}
		if b.Alloc >= 0 {
			band = int64(p.band(b.Alloc))
		}
		p.d.First.Blocks = append(p.d.First.Blocks, [6]int64{int64(b.Address), int64(b.Size), int64(b.State), first, seg, band})
	}
}

// sample is Op's preview for op i, total bytes live, in every column whose
// stretch holds it, and sets alone.
func (p *packer) sample(i int, total int64) {
	for p.col0 < previewW && p.sb[p.col0] <= i {
		p.col0++
	}
	k := p.col0
	for ; k < previewW && p.sa[k] <= i; k++ {
		if i == p.sa[k] || total > p.bestTotal[k] {
			p.best[k], p.bestTotal[k], p.bestAgg[k] = i, total, p.aggLive
		}
	}
	p.alone = i + 1
	if k == p.col0+1 { // in one column: until its stretch or the next one's ends
		p.alone = p.sb[p.col0]
		if k < previewW {
			p.alone = min(p.alone, p.sa[k])
		}
	}
}

func (p *packer) Key(op int, blocks []figures.BlockRec) {
	c := &p.c
	p.d.Keys = append(p.d.Keys, op)
	c.klen.add(int64(len(blocks)), false)
	p.blocks(blocks, true, &c.ksize, &c.kstate, &c.kseg)
}

// blocks writes a list of blocks. Block sizes and addresses are written in
// units of 512 bytes when they all allow it, as are the allocations'
// addresses (PyTorch rounds every block so; else the packer asks for the
// ops again and writes bytes): 9 bits fewer to write and deflate, most of
// a byte a value in columns addr and bseg. A block's address only
// on the first block of its segment, the page adds up the sizes for the
// rest, and a used block's size less its band's allocation's, rounded up
// to the unit: mostly 0. A block's state and band are one value, 8 × band + state (the
// state's bit 4 marks a segment's first block): a used block's band counts
// back from the newest band made so far (most changes are the op's own
// allocation), or in a key (abs), which holds mostly the same long-lived
// allocations as the key before, is 1 + the band; 0 is none.
func (p *packer) blocks(bs []figures.BlockRec, abs bool, size, state, seg *column) {
	made := int64(p.d.Bands)
	for i := range bs {
		b := &bs[i]
		if (b.Size|b.SegSize|b.Address)%512 != 0 {
			p.odd = true
		}
		sz := int64(b.Size >> p.unitLog)
		st := int64(b.State)
		if b.First {
			st |= 4
			if u, ok := seg.try(int64(b.Address>>p.unitLog), true); !ok {
				seg.put(u)
			}
			if u, ok := seg.try(int64(b.SegSize>>p.unitLog), false); !ok {
				seg.put(u)
			}
		}
		k := int64(0)
		if b.Alloc >= 0 {
			if bd := p.band(b.Alloc); bd >= 0 {
				k = made - int64(bd)
				if abs {
					k = int64(bd) + 1
				}
				sz -= int64((p.bSize[bd] + p.d.Unit - 1) >> p.unitLog)
			}
		}
		if u, ok := size.try(sz, false); !ok {
			size.put(u)
		}
		if u, ok := state.try(k<<3|st, false); !ok {
			state.put(u)
		}
	}
}

func (p *packer) Finish() error {
	if p.odd && !p.unit1 {
		p.unit1 = true
		return figures.ErrExplorerAgain
	}
	e, c := p.head, &p.c
	for b := range p.bStart {
		if u, ok := c.len.try(int64(p.bEnd[b]-p.bStart[b]), false); !ok {
			c.len.put(u)
		}
		if u, ok := c.rel.try(int64(p.bRel[b]-p.bEnd[b]), false); !ok {
			c.rel.put(u)
		}
	}
	scratch := p.bRel // written: the preview's, as its memory
	p.bRel, p.bandOf = nil, nil
	d := &p.d
	d.Peak, d.OOM, d.OOMSize, d.OOMRounded = e.PeakOp, e.OOMOp, e.OOMSize, e.OOMRounded
	if !p.first { // no op: the map is empty
		d.First = exFirstMap{Op: firstOp(e), Blocks: [][6]int64{}}
	}
	d.Verdict, d.Stacks, d.Frames, d.User = e.Verdict, e.Stacks, e.Frames, e.User
	d.Cats = e.Categories
	for _, s := range e.CategorySeries {
		d.CatOps = append(d.CatOps, s.Op)
		d.CatBytes = append(d.CatBytes, s.Bytes)
	}
	for _, s := range e.Spans {
		d.Spans = append(d.Spans, [3]any{s.Start, s.End, s.Name})
	}
	d.Cols = map[string][3]int{}
	var cols []*column
	off := 0
	for _, col := range p.columns() {
		d.Cols[col.name] = [3]int{off, col.c.raw(), col.c.n}
		off += col.c.raw()
		cols = append(cols, col.c)
	}
	d.bin = deflateColumns(cols)
	for k := range p.best { // each column's op and what was aggregated then
		if p.best[k] < 0 {
			p.best[k] = 0
		}
	}
	d.Preview = base64.StdEncoding.EncodeToString(preview(p.ops, p.best, p.bestAgg, max(1, float64(p.maxLive)),
		p.bStart, p.bEnd, p.bSize, p.bStack, scratch).b)
	d.PreviewW, d.PreviewH = previewW, previewH
	p.bStart, p.bEnd, p.bRel, p.bSize, p.bStack, p.bandOf = nil, nil, nil, nil, nil, nil
	p.c = struct {
		start, len, rel, size, addr, stream, stack, agg, time, cat column
		pos, insdel, insx, bsize, bstate, bseg                     column
		klen, ksize, kstate, kseg                                  column
	}{}
	p.done = true
	return nil
}

// columns are the packer's columns, named as the page reads them, in the
// order they are written.
func (p *packer) columns() []namedColumn {
	c := &p.c
	return []namedColumn{{"start", &c.start}, {"len", &c.len}, {"rel", &c.rel}, {"size", &c.size}, {"addr", &c.addr},
		{"stream", &c.stream}, {"stack", &c.stack}, {"agg", &c.agg}, {"time", &c.time}, {"cat", &c.cat},
		{"pos", &c.pos}, {"insdel", &c.insdel}, {"insx", &c.insx}, {"bsize", &c.bsize}, {"bstate", &c.bstate},
		{"bseg", &c.bseg}, {"klen", &c.klen}, {"ksize", &c.ksize}, {"kstate", &c.kstate}, {"kseg", &c.kseg}}
}

type namedColumn struct {
	name string
	c    *column
}
