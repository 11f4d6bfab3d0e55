package htmlreport

import (
	"strconv"

	"github.com/gpumem/gpumem/internal/figures"
	"github.com/gpumem/gpumem/internal/units"
)

// Segment map layout: segments flow left to right in address order and
// wrap like words, each a bar whose length is its size at one scale for
// the whole map, at least minSegW pixels so that small segments stay
// visible.
const (
	mapW      = chartW - 2*mapMargin
	mapMargin = 8
	barH      = 18
	rowH      = 26
	segGap    = 3
	minSegW   = 3
	// targetRows is how many rows the whole map may fill before the
	// largest segment, rather than the total, sets the scale.
	targetRows = 12
	// maxRects bounds the rectangles of one map: beyond it, neighbouring
	// blocks of one state share a rectangle.
	maxRects = 12000
)

type segMap struct {
	ID, Title, Note string
	H               int
	ViewBox         string
	Segs            []segView
	Segments        int
	Blocks          int
	Rects           int
	Bytes           uint64
	States          []stateSum
	Largest         *blockView // the largest free block, nil if none
	LargestSize     string
	LargestSeg      segView
	HiX, HiY, HiW   string // the outline drawn around it
}

type segView struct {
	X, Y, W string
	Address string // hex
	Size    uint64
	Blocks  []blockView
}

type blockView struct {
	X, W    string // relative to the segment
	State   figures.BlockState
	Size    uint64
	Offset  uint64 // from the segment's start
	Count   int    // blocks this rectangle stands for
	Largest bool
	x, w    float64
}

type stateSum struct {
	State  figures.BlockState
	Label  string
	Bytes  string
	Blocks int
}

func newSegMap(id, title, note string, segs []figures.SegmentMap) *segMap {
	m := &segMap{ID: id, Title: title, Note: note, Segments: len(segs)}
	var maxSeg uint64
	nblocks := 0
	for _, s := range segs {
		m.Bytes += s.Size
		maxSeg = max(maxSeg, s.Size)
		nblocks += len(s.Blocks)
	}
	m.Blocks = nblocks
	merge := nblocks > maxRects
	// bytes per pixel
	scale := max(float64(maxSeg)/mapW, float64(m.Bytes)/(mapW*targetRows), 1)

	// the largest free block, the first of them on ties
	li, lj := -1, -1
	var largest uint64
	bytesBy := map[figures.BlockState]uint64{}
	countBy := map[figures.BlockState]int{}
	for i, s := range segs {
		for j, b := range s.Blocks {
			bytesBy[b.State] += b.Size
			countBy[b.State]++
			if b.State == figures.Free && b.Size > largest {
				li, lj, largest = i, j, b.Size
			}
		}
	}

	x, y := 0.0, 0
	for i, s := range segs {
		w := max(float64(s.Size)/scale, minSegW)
		if x > 0 && x+w > mapW {
			x, y = 0, y+rowH
		}
		sv := segView{X: num(x + mapMargin), Y: strconv.Itoa(y + 4), W: num(w),
			Address: "0x" + strconv.FormatUint(s.Address, 16), Size: s.Size}
		total := s.Size
		if total == 0 {
			total = 1
		}
		var off uint64
		for j := 0; j < len(s.Blocks); j++ {
			b := s.Blocks[j]
			bv := blockView{State: b.State, Size: b.Size, Offset: off, Count: 1, Largest: i == li && j == lj}
			// merging never swallows the largest free block
			for merge && !bv.Largest && j+1 < len(s.Blocks) && s.Blocks[j+1].State == b.State && !(i == li && j+1 == lj) {
				j++
				bv.Size += s.Blocks[j].Size
				bv.Count++
			}
			bv.x = float64(off) / float64(total) * w
			bv.w = max(float64(bv.Size)/float64(total)*w, 0.1)
			bv.X, bv.W = num(bv.x), num(bv.w)
			off += bv.Size
			sv.Blocks = append(sv.Blocks, bv)
			m.Rects++
		}
		if i == li {
			m.LargestSeg = sv
			for _, bv := range sv.Blocks {
				if bv.Largest {
					m.Largest = &bv
					m.HiX, m.HiY, m.HiW = num(x+mapMargin+bv.x-1.5), strconv.Itoa(y+4-2), num(max(bv.w, 2)+3)
				}
			}
		}
		m.Segs = append(m.Segs, sv)
		x += w + segGap
	}
	if m.Largest != nil {
		m.LargestSize = units.FormatUBytes(m.Largest.Size)
	}
	m.H = y + rowH + 4
	m.ViewBox = "0 0 " + strconv.Itoa(chartW) + " " + strconv.Itoa(m.H)
	for _, st := range []struct {
		s     figures.BlockState
		label string
	}{{figures.Allocated, "allocated"}, {figures.Pending, "pending free"}, {figures.Free, "free"}} {
		m.States = append(m.States, stateSum{State: st.s, Label: st.label,
			Bytes: units.FormatUBytes(bytesBy[st.s]), Blocks: countBy[st.s]})
	}
	return m
}
