package htmlreport

import (
	"math"
	"slices"

	"github.com/gpumem/gpumem/internal/figures"
)

// The page's first view of the explorer comes from two small pieces made
// here, so that it shows before the bulk columns are decoded (in a Web
// Worker, which takes seconds for a million events): the whole trace's
// bands as explorer.js's render draws them, and the segment map at the op
// where the scrubber starts.

// The preview's size in pixels: about the bands canvas on a desktop
// window (its height is the canvas's); the page stretches it to fit.
const previewW, previewH = 1200, 320

// preview draws the bands of the whole trace as render in explorer.js does
// at previewW x previewH, with the same arithmetic, and returns its pixels,
// column after column from the top left (they have the longer runs), as
// runs: a palette entry (0 nothing, 1 the grey of aggregated and sub-pixel
// bands, 2+k the colour of stack k-1's site), then a length. bands are the kept allocations in band order
// and agg the aggregated bytes live after each op.
func preview(e *figures.Explorer, bands []int, agg []int64) *column {
	ops, n, W, H := e.Ops, len(bands), previewW, float64(previewH)
	out := &column{}
	if ops == 0 {
		return out
	}
	start, end, size := make([]int, n), make([]int, n), make([]float64, n)
	delta := make([]int64, ops+1)
	for j, i := range bands {
		a := e.Allocs[i]
		start[j], end[j], size[j] = int(a.Start), int(a.End), float64(a.Size)
		delta[a.Start] += int64(a.Size)
		delta[a.End] -= int64(a.Size)
	}
	total, ymax, acc := make([]float64, ops), 1.0, int64(0)
	for i := range ops {
		acc += delta[i]
		total[i] = float64(acc + agg[i])
		ymax = max(ymax, total[i])
	}
	// each column shows the op of its stretch where the most bytes were live
	samples := make([]int, W)
	for c := range samples {
		at := func(f float64) float64 { return 0 + f*float64(ops) }
		a := max(0, int(math.Floor(at(float64(c)/float64(W)))))
		b := min(ops, max(a+1, int(math.Floor(at(float64(c+1)/float64(W))))))
		if c == W-1 {
			b = min(ops, max(a+1, ops))
		}
		best := min(a, ops-1)
		for o := a; o < b; o++ {
			if total[o] > total[best] {
				best = o
			}
		}
		samples[c] = best
	}
	// the live bands' sizes in a Fenwick tree, in band order
	fen, log := make([]float64, n+1), 1
	for log*2 <= n {
		log *= 2
	}
	add := func(i int, v float64) {
		for i++; i <= n; i += i & -i {
			fen[i] += v
		}
	}
	find := func(v float64) int { // the first band whose prefix sum exceeds v
		p := 0
		for s := log; s > 0; s >>= 1 {
			if p+s <= n && fen[p+s] <= v {
				p += s
				v -= fen[p]
			}
		}
		return p
	}
	prefix := func(i int) float64 {
		s := 0.0
		for i++; i > 0; i -= i & -i {
			s += fen[i]
		}
		return s
	}
	byEnd := make([]int, n)
	for j := range byEnd {
		byEnd[j] = j
	}
	slices.SortStableFunc(byEnd, func(a, b int) int { return end[a] - end[b] })
	s0, pa, pe := samples[0], 0, 0
	for i := range n {
		if start[i] <= s0 && end[i] > s0 {
			fen[i+1] += size[i]
		}
	}
	for i := 1; i <= n; i++ {
		if j := i + (i & -i); j <= n {
			fen[j] += fen[i]
		}
	}
	for pa < n && start[pa] <= s0 {
		pa++
	}
	for pe < n && end[byEnd[pe]] <= s0 {
		pe++
	}
	round := func(x float64) int { return int(math.Floor(x + 0.5)) } // as JavaScript's Math.round
	img, prev, k2b := make([]int64, W*previewH), s0, H/ymax
	for c := range W {
		px := func(r int) *int64 { return &img[c*previewH+r] }
		s := samples[c]
		if s != prev {
			for ; pa < n && start[pa] <= s; pa++ {
				if end[pa] > s {
					add(pa, size[pa])
				}
			}
			for ; pe < n && end[byEnd[pe]] <= s; pe++ {
				if k := byEnd[pe]; start[k] <= prev {
					add(k, -size[k])
				}
			}
			prev = s
		}
		base, y := float64(agg[s]), previewH
		if base > 0 {
			top := H - base*k2b
			for r := max(0, round(top)); r < y; r++ {
				*px(r) = 1
			}
			y = round(top)
		}
		tot, pos := 0.0, 0.0
		if n > 0 {
			tot = prefix(n - 1)
		}
		for pos < tot {
			bi := find(pos)
			hiB := prefix(bi)
			loB := hiB - size[bi]
			yTop, yBot := H-(base+hiB)*k2b, H-(base+loB)*k2b
			if yBot-yTop >= 1 {
				for r := max(0, round(yTop)); r < round(yBot); r++ {
					*px(r) = int64(e.Allocs[bands[bi]].Stack) + 3
				}
				pos = hiB
			} else { // a pixel of bands too small to see
				row := int(math.Floor(yBot - 1e-9))
				rowLo := (H-float64(row)-1)/k2b - base
				if row >= 0 && row < previewH {
					*px(row) = 1
				}
				pos = max(hiB, rowLo+1/k2b)
			}
		}
	}
	for i := 0; i < len(img); {
		k := i
		for k < len(img) && img[k] == img[i] {
			k++
		}
		out.add(img[i], false)
		out.add(int64(k-i), false)
		i = k
	}
	return out
}

// firstOp is the op after which the page's scrubber starts: the failing
// one at an out-of-memory, else the peak's, as explorer.js's setScrub.
func firstOp(e *figures.Explorer) int {
	k := e.PeakOp + 1
	if e.OOMOp >= 0 {
		k = e.OOMOp + 1
	}
	return min(max(1, k), e.Ops)
}

// blocksAt is the block list after the first k ops: the last key at or
// before k, and the changes since (what stateAt in explorer.js does).
func blocksAt(e *figures.Explorer, k int) []figures.BlockRec {
	var st []figures.BlockRec
	op := 0
	if j := keyBefore(e.Keys, k); j >= 0 {
		st, op = slices.Clone(e.Keys[j].Blocks), e.Keys[j].Op
	}
	for ; op < k; op++ {
		ch := e.Changes[op]
		st = slices.Replace(st, int(ch.Pos), int(ch.Pos+ch.Del), ch.Ins...)
	}
	return st
}

// keyBefore is the index of the last key at or before op k, -1 when none.
func keyBefore(keys []figures.Keyframe, k int) int {
	i, _ := slices.BinarySearchFunc(keys, k+1, func(kf figures.Keyframe, t int) int { return kf.Op - t })
	return i - 1
}

// firstMap is the segment map where the scrubber starts, as stateAt in
// explorer.js gives it: each block's address, size, state, whether it
// starts a segment (1) and the segment's size, and its band (-1 none).
func firstMap(e *figures.Explorer, keep []int32) exFirstMap {
	k := firstOp(e)
	m := exFirstMap{Op: k, Blocks: [][6]int64{}}
	for _, b := range blocksAt(e, k) {
		first, seg, band := int64(0), int64(0), int64(-1)
		if b.First {
			first, seg = 1, int64(b.SegSize)
		}
		if b.Alloc >= 0 && keep[b.Alloc] >= 0 {
			band = int64(keep[b.Alloc])
		}
		m.Blocks = append(m.Blocks, [6]int64{int64(b.Address), int64(b.Size), int64(b.State), first, seg, band})
	}
	return m
}

type exFirstMap struct {
	Op     int        `json:"op"`
	Blocks [][6]int64 `json:"blocks"`
}
