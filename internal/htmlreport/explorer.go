package htmlreport

import (
	"bytes"
	"cmp"
	"compress/flate"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"slices"

	"github.com/gpumem/gpumem/internal/figures"
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

// column is one packed integer column.
type column struct {
	b    []byte
	last int64
	n    int
}

// add appends v, as the difference from the last value when delta.
func (c *column) add(v int64, delta bool) {
	d := v
	if delta {
		d, c.last = v-c.last, v
	}
	u := uint64(d<<1) ^ uint64(d>>63)
	for u >= 0x80 {
		c.b = append(c.b, byte(u)|0x80)
		u >>= 7
	}
	c.b = append(c.b, byte(u))
	c.n++
}

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
	Unit       uint64    `json:"unit"`  // block and segment sizes are in these units
	// Cats name the bands' categories (column cat: 1 + index, 0 none);
	// CatOps and CatBytes sample the bytes of each category over the ops.
	Cats     []string   `json:"cats"`
	CatOps   []int      `json:"catOps"`
	CatBytes [][]uint64 `json:"catBytes"`
	// Cols places each column in Bin: its offset, length in bytes and
	// number of values.
	Cols map[string][3]int `json:"cols"`
	// Bin is the columns, deflated, in base64: written apart from the
	// rest, so that the page parses only the small part before drawing.
	Bin string `json:"-"`
	// Preview is the first view of the bands (preview), its runs in
	// base64; First the segment map where the scrubber starts.
	Preview  string     `json:"preview"`
	PreviewW int        `json:"previewW"`
	PreviewH int        `json:"previewH"`
	First    exFirstMap `json:"first"`
}

// explorerData packs the explorers for the page: their figures, and apart
// from them their columns (a list of each device's Bin); "null" when none.
func explorerData(exs []*figures.Explorer, maxBands int) (meta, bins template.JS, err error) {
	if len(exs) == 0 {
		return "null", "null", nil
	}
	if maxBands <= 0 {
		maxBands = DefaultMaxBands
	}
	var out []exDevice
	var bs []string
	for _, e := range exs {
		d := packExplorer(e, maxBands)
		out = append(out, d)
		bs = append(bs, d.Bin)
	}
	// json.Marshal writes <, > and & as \u003c..., so no "</script>" can
	// end the script element early.
	m, err := json.Marshal(out)
	if err != nil {
		return "", "", err
	}
	b, err := json.Marshal(bs)
	if err != nil {
		return "", "", err
	}
	return template.JS(m), template.JS(b), nil
}

func packExplorer(e *figures.Explorer, maxBands int) exDevice {
	d := exDevice{Device: e.Device, Ops: e.Ops, Peak: e.PeakOp, OOM: e.OOMOp, OOMSize: e.OOMSize,
		OOMRounded: e.OOMRounded, Verdict: e.Verdict, Stacks: e.Stacks, Frames: e.Frames, User: e.User}
	// the allocations that keep a band: all, or the largest maxBands
	keep := make([]int32, len(e.Allocs)) // index among kept bands, -1 aggregated
	if len(e.Allocs) > maxBands {
		order := make([]int, len(e.Allocs))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(e.Allocs[b].Size, e.Allocs[a].Size) })
		for i := range keep {
			keep[i] = -1
		}
		for _, i := range order[:maxBands] {
			keep[i] = 0
		}
	}
	var c struct {
		start, len, rel, size, addr, stream, stack, agg, time, cat column
		pos, del, ins, bsize, bstate, bband, bseg                  column
		klen, ksize, kstate, kband, kseg                           column
	}
	var aggDelta []int64
	if len(e.Allocs) > maxBands {
		aggDelta = make([]int64, e.Ops+1)
	}
	for i, a := range e.Allocs {
		if keep[i] < 0 {
			d.Aggregated++
			aggDelta[a.Start] += int64(a.Size)
			aggDelta[a.End] -= int64(a.Size)
			continue
		}
		keep[i] = int32(d.Bands)
		d.Bands++
		c.start.add(int64(a.Start), true)
		c.len.add(int64(a.End-a.Start), false)
		c.rel.add(int64(a.Released-a.End), false)
		c.size.add(int64(a.Size), false)
		c.addr.add(int64(a.Address), true)
		c.stream.add(int64(a.Stream), true)
		c.stack.add(int64(a.Stack), true)
		if e.Categories != nil {
			c.cat.add(int64(a.Category), false)
		}
	}
	d.Cats = e.Categories
	for _, p := range e.CategorySeries {
		d.CatOps = append(d.CatOps, p.Op)
		d.CatBytes = append(d.CatBytes, p.Bytes)
	}
	for _, v := range aggDelta[:min(len(aggDelta), e.Ops)] {
		c.agg.add(v, false)
	}
	for _, t := range e.TimeUS {
		c.time.add(t, true)
	}
	// Block sizes are written in units of 512 bytes when they all allow
	// it (PyTorch rounds every block so); a block's address only on the
	// first block of its segment, the page adds up the sizes for the rest.
	d.Unit = 512
	each := func(f func(b figures.BlockRec)) {
		for _, ch := range e.Changes {
			for _, b := range ch.Ins {
				f(b)
			}
		}
		for _, k := range e.Keys {
			for _, b := range k.Blocks {
				f(b)
			}
		}
	}
	each(func(b figures.BlockRec) {
		if b.Size%d.Unit != 0 || b.SegSize%d.Unit != 0 {
			d.Unit = 1
		}
	})
	// a used block's band counts back from the newest band made so far:
	// most changes are the op's own allocation
	made, startOf := 0, func(i int) int32 { return e.Allocs[i].Start }
	kept := make([]int, 0, d.Bands) // allocation index of each band
	for i := range e.Allocs {
		if keep[i] >= 0 {
			kept = append(kept, i)
		}
	}
	upto := func(op int) { // bands made by ops before op
		for made < len(kept) && int(startOf(kept[made])) < op {
			made++
		}
	}
	blocks := func(bs []figures.BlockRec, size, state, band, seg *column) {
		for _, b := range bs {
			size.add(int64(b.Size/d.Unit), false)
			st := int64(b.State)
			if b.First {
				st |= 4
				seg.add(int64(b.Address), true)
				seg.add(int64(b.SegSize/d.Unit), false)
			}
			state.add(st, false)
			k := int64(0)
			if b.Alloc >= 0 && keep[b.Alloc] >= 0 {
				k = int64(made) - int64(keep[b.Alloc])
			}
			band.add(k, false)
		}
	}
	for i, ch := range e.Changes {
		upto(i + 1)
		c.pos.add(int64(ch.Pos), true)
		c.del.add(int64(ch.Del), false)
		c.ins.add(int64(len(ch.Ins)), false)
		blocks(ch.Ins, &c.bsize, &c.bstate, &c.bband, &c.bseg)
	}
	made = 0
	d.Keys = []int{}
	for _, k := range e.Keys {
		upto(k.Op)
		d.Keys = append(d.Keys, k.Op)
		c.klen.add(int64(len(k.Blocks)), false)
		blocks(k.Blocks, &c.ksize, &c.kstate, &c.kband, &c.kseg)
	}
	var bin bytes.Buffer
	d.Cols = map[string][3]int{}
	for _, col := range []struct {
		name string
		c    *column
	}{{"start", &c.start}, {"len", &c.len}, {"rel", &c.rel}, {"size", &c.size}, {"addr", &c.addr},
		{"stream", &c.stream}, {"stack", &c.stack}, {"agg", &c.agg}, {"time", &c.time}, {"cat", &c.cat},
		{"pos", &c.pos}, {"del", &c.del}, {"ins", &c.ins}, {"bsize", &c.bsize}, {"bstate", &c.bstate},
		{"bband", &c.bband}, {"bseg", &c.bseg}, {"klen", &c.klen}, {"ksize", &c.ksize},
		{"kstate", &c.kstate}, {"kband", &c.kband}, {"kseg", &c.kseg}} {
		d.Cols[col.name] = [3]int{bin.Len(), len(col.c.b), col.c.n}
		bin.Write(col.c.b)
	}
	var z bytes.Buffer
	w, _ := flate.NewWriter(&z, flate.DefaultCompression) // the level is valid
	w.Write(bin.Bytes())
	w.Close()
	d.Bin = base64.StdEncoding.EncodeToString(z.Bytes())
	for _, s := range e.Spans {
		d.Spans = append(d.Spans, [3]any{s.Start, s.End, s.Name})
	}
	agg := make([]int64, e.Ops) // aggregated bytes live after each op
	for i, acc := 0, int64(0); i < min(len(aggDelta), e.Ops); i++ {
		acc += aggDelta[i]
		agg[i] = acc
	}
	d.Preview = base64.StdEncoding.EncodeToString(preview(e, kept, agg).b)
	d.PreviewW, d.PreviewH = previewW, previewH
	d.First = firstMap(e, keep)
	return d
}
