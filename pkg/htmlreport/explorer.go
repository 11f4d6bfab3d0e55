package htmlreport

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"slices"

	"github.com/gpumem/gpumem/pkg/figures"
)

// DefaultMaxBands is how many allocations the explorer draws as bands of
// their own unless told otherwise; beyond it the largest keep theirs and
// the rest are drawn as one aggregate.
const DefaultMaxBands = 2_000_000

// The explorer's data is packed for size: each integer column is delta- or
// plain-coded as zigzag LEB128 varints, then base64; stacks and frames are
// written once and referred to by index. The page decodes it (explorer.js).

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

func (c *column) String() string { return base64.StdEncoding.EncodeToString(c.b) }

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
	Cols       exCols    `json:"cols"`
	Stacks     [][]int32 `json:"stacks"`
	Frames     []string  `json:"frames"`
	User       []bool    `json:"user"`
	Spans      [][3]any  `json:"spans"` // start, end, name
	Inserted   int       `json:"inserted"`
	Firsts     int       `json:"firsts"`
	Keys       []int     `json:"keys"`    // the ops after which the key lists hold
	KeyLens    []int     `json:"keyLens"` // their lengths
}

type exCols struct {
	// bands, in allocation order
	Start, Len, Rel, Size, Addr, Stream, Stack string
	// per op: the aggregate's change in bytes, the recorded time
	Agg, Time string
	// per op: the block list's change; then the inserted blocks
	Pos, Del, Ins                      string
	BSize, BAddr, BState, BSeg, BAlloc string
	// the key lists' blocks, one list after the other
	KSize, KAddr, KState, KSeg, KAlloc string
}

// explorerData packs the explorers for the page; "null" when none.
func explorerData(exs []*figures.Explorer, maxBands int) (template.JS, error) {
	if len(exs) == 0 {
		return "null", nil
	}
	if maxBands <= 0 {
		maxBands = DefaultMaxBands
	}
	var out []exDevice
	for _, e := range exs {
		out = append(out, packExplorer(e, maxBands))
	}
	// json.Marshal writes <, > and & as \u003c..., so no "</script>" can
	// end the script element early.
	b, err := json.Marshal(out)
	if err != nil {
		return "", err
	}
	return template.JS(b), nil
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
		start, len, rel, size, addr, stream, stack, agg, time, pos, del, ins   column
		bsize, baddr, bstate, bseg, balloc, ksize, kaddr, kstate, kseg, kalloc column
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
	}
	for _, v := range aggDelta[:min(len(aggDelta), e.Ops)] {
		c.agg.add(v, false)
	}
	for _, t := range e.TimeUS {
		c.time.add(t, true)
	}
	var next uint64 // where the last block written ended
	blocks := func(bs []figures.BlockRec, size, addr, state, seg, alloc *column) {
		for _, b := range bs {
			size.add(int64(b.Size), false)
			addr.add(int64(b.Address-next), false)
			next = b.Address + b.Size
			st := int64(b.State)
			if b.First {
				st |= 4
				seg.add(int64(b.SegSize), false)
			}
			state.add(st, false)
			k := int64(-1)
			if b.Alloc >= 0 {
				k = int64(keep[b.Alloc])
			}
			alloc.add(k, true)
		}
	}
	for _, ch := range e.Changes {
		c.pos.add(int64(ch.Pos), true)
		c.del.add(int64(ch.Del), false)
		c.ins.add(int64(len(ch.Ins)), false)
		blocks(ch.Ins, &c.bsize, &c.baddr, &c.bstate, &c.bseg, &c.balloc)
		d.Inserted += len(ch.Ins)
	}
	d.Firsts = c.bseg.n
	next = 0
	d.Keys, d.KeyLens = []int{}, []int{}
	for _, k := range e.Keys {
		d.Keys = append(d.Keys, k.Op)
		d.KeyLens = append(d.KeyLens, len(k.Blocks))
		blocks(k.Blocks, &c.ksize, &c.kaddr, &c.kstate, &c.kseg, &c.kalloc)
	}
	d.Cols = exCols{Start: c.start.String(), Len: c.len.String(), Rel: c.rel.String(), Size: c.size.String(),
		Addr: c.addr.String(), Stream: c.stream.String(), Stack: c.stack.String(), Agg: c.agg.String(),
		Time: c.time.String(), Pos: c.pos.String(), Del: c.del.String(), Ins: c.ins.String(),
		BSize: c.bsize.String(), BAddr: c.baddr.String(), BState: c.bstate.String(), BSeg: c.bseg.String(), BAlloc: c.balloc.String(),
		KSize: c.ksize.String(), KAddr: c.kaddr.String(), KState: c.kstate.String(), KSeg: c.kseg.String(), KAlloc: c.kalloc.String()}
	for _, s := range e.Spans {
		d.Spans = append(d.Spans, [3]any{s.Start, s.End, s.Name})
	}
	return d
}
