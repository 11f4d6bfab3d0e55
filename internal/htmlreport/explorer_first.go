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
// column after column from the top left, as previewRuns writes them, in
// palette entries (0 nothing, 1 the grey of aggregated and sub-pixel
// bands, 2+k the colour of stack k-1's site). Column c
// shows op samples[c], the op of its stretch where the most bytes were
// live (ymax the most of all, at least 1), with agg[c] aggregated bytes
// live then; the bands are the kept allocations in band order, each made
// by op start, ended by op end. scratch, when as long as start, is memory
// the preview may take.
func preview(ops int, samples []int, agg []int64, ymax float64, start, end []int32, sizes []uint64, stack []int32, scratch []int32) *column {
	W, H := previewW, float64(previewH)
	out := &column{}
	if ops == 0 {
		return out
	}
	// only the bands live at some column's op are ever drawn: of a big
	// trace's bands, mostly short-lived, a sixth. They are taken apart,
	// in band order, the order the drawing below stacks the live ones in:
	// the others, never in the tree, change nothing of what it draws
	ux := slices.Compact(slices.Clone(samples)) // the columns' ops, each once, in order
	var kept []int32                            // the bands drawn, as indexes into start, end...
	for i, j := 0, 0; i < len(start); i++ {
		for j < len(ux) && ux[j] < int(start[i]) { // bands come in order of start
			j++
		}
		if j < len(ux) && ux[j] < int(end[i]) { // live at op ux[j]
			kept = append(kept, int32(i))
		}
	}
	n := len(kept)
	start, end, sizes, stack = pick(start, kept), pick(end, kept), pick(sizes, kept), pick(stack, kept)
	size := func(j int) float64 { return float64(sizes[j]) }
	// the live bands' sizes in a Fenwick tree, in band order
	fen, log := make([]float64, n+1), 1
	for log*2 <= n {
		log *= 2
	}
	// in marks the bands in the tree, so that when the bands are drawn up
	// to one's top, the next, when live, is found without a search
	in := make([]uint64, (n+63)/64)
	live := func(i int) bool { return in[i>>6]&(1<<(i&63)) != 0 }
	add := func(i int, v float64) {
		in[i>>6] ^= 1 << (i & 63) // each band is added once and taken out once
		for i++; i <= n; i += i & -i {
			fen[i] += v
		}
	}
	// find is the first band whose prefix sum exceeds v, and the sum of
	// the bands before it (sums of whole bytes, exact in float64)
	find := func(v float64) (int, float64) {
		p, sum := 0, 0.0
		for s := log; s > 0; s >>= 1 {
			if p+s <= n && fen[p+s] <= v {
				p += s
				v -= fen[p]
				sum += fen[p]
			}
		}
		return p, sum
	}
	prefix := func(i int) float64 {
		s := 0.0
		for i++; i > 0; i -= i & -i {
			s += fen[i]
		}
		return s
	}
	// the bands in order of the first column op at or past their end, by
	// counting sort on that op's rank (bucket): the order the sweep below
	// takes them out of the tree in (sums of whole bytes, exact in any
	// order)
	byEnd, at, bucket := scratch, make([]int32, len(ux)+2), make([]int32, n)
	if len(byEnd) < n {
		byEnd = make([]int32, n)
	}
	byEnd = byEnd[:n]
	for j, e := range end {
		lo, hi := 0, len(ux) // how many of the ops are before op e
		for lo < hi {
			if m := int(uint(lo+hi) >> 1); ux[m] < int(e) {
				lo = m + 1
			} else {
				hi = m
			}
		}
		bucket[j] = int32(lo)
		at[lo+1]++
	}
	sum := int32(0) // in a register: at[i-1] reread would wait on its store
	for i, c := range at {
		sum += c
		at[i] = sum
	}
	for j, k := range bucket {
		byEnd[at[k]] = int32(j)
		at[k]++
	}
	s0, pa, pe := samples[0], 0, 0
	for i := range n {
		if int(start[i]) <= s0 && int(end[i]) > s0 {
			fen[i+1] += size(i)
			in[i>>6] |= 1 << (i & 63)
		}
	}
	for i := 1; i <= n; i++ {
		if j := i + (i & -i); j <= n {
			fen[j] += fen[i]
		}
	}
	for pa < n && int(start[pa]) <= s0 {
		pa++
	}
	for pe < n && int(end[byEnd[pe]]) <= s0 {
		pe++
	}
	round := func(x float64) int { return int(math.Floor(x + 0.5)) } // as JavaScript's Math.round
	// the pixels, as palette entries (int32, half the 3 MB of int64)
	img, prev, k2b := make([]int32, W*previewH), s0, H/ymax
	for c := range W {
		px := func(r int) *int32 { return &img[c*previewH+r] }
		s := samples[c]
		if s != prev {
			for ; pa < n && int(start[pa]) <= s; pa++ {
				if int(end[pa]) > s {
					add(pa, size(pa))
				}
			}
			for ; pe < n && int(end[byEnd[pe]]) <= s; pe++ {
				if k := int(byEnd[pe]); int(start[k]) <= prev {
					add(k, -size(k))
				}
			}
			prev = s
		}
		base, y := float64(agg[c]), previewH
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
		bi, loB, atTop := 0, 0.0, false // atTop: pos is band bi's top
		for pos < tot {
			if atTop && bi+1 < n && live(bi+1) && sizes[bi+1] > 0 {
				// find(pos)'s answer: pos is the sum of the bands up to bi
				// (whole bytes, exact), the next band live adds to it
				bi, loB = bi+1, pos
			} else {
				bi, loB = find(pos)
			}
			hiB := loB + size(bi) // the band found is live: its size is in the tree
			yTop, yBot := H-(base+hiB)*k2b, H-(base+loB)*k2b
			if yBot-yTop >= 1 {
				for r := max(0, round(yTop)); r < round(yBot); r++ {
					*px(r) = stack[bi] + 3
				}
				pos, atTop = hiB, true
			} else { // a pixel of bands too small to see
				row := int(math.Floor(yBot - 1e-9))
				rowLo := (H-float64(row)-1)/k2b - base
				if row >= 0 && row < previewH {
					*px(row) = 1
				}
				pos = max(hiB, rowLo+1/k2b)
				atTop = pos == hiB
			}
		}
	}
	return previewRuns(img, out)
}

// pick is v's values at the indexes ks, in order.
func pick[T any](v []T, ks []int32) []T {
	out := make([]T, len(ks))
	for j, k := range ks {
		out[j] = v[k]
	}
	return out
}

// previewRefs is how many columns back a preview's column may copy from.
const previewRefs = 32

// previewRuns writes the preview's pixels img, column after column, as
// runs: each column a reference k, 0 or the column k back that it copies
// most of, then runs of its rows, each a token and a length: 0 the
// referred column's pixels, else 1 + a palette entry. The bands of a
// trace that repeats its steps draw columns like ones a step before: a
// tenth of the runs of each column on its own.
func previewRuns(img []int32, out *column) *column {
	col := func(c int) []int32 { return img[c*previewH : (c+1)*previewH] }
	// runs of a column on its own, and against another, stopping past
	// most (two loops: they are most of the preview's time)
	self := func(a []int32) int {
		n := 0
		for r := 0; r < len(a); n++ {
			k, v := r+1, a[r]
			for k < len(a) && a[k] == v {
				k++
			}
			r = k
		}
		return n
	}
	runs := func(a, ref []int32, most int) int {
		ref = ref[:len(a)]
		n := 0
		for r := 0; r < len(a) && n <= most; n++ {
			k := r + 1
			if v := a[r]; v == ref[r] {
				for k < len(a) && a[k] == ref[k] {
					k++
				}
			} else {
				for k < len(a) && a[k] == v && a[k] != ref[k] {
					k++
				}
			}
			r = k
		}
		return n
	}
	for c := range len(img) / previewH {
		a, best, bk := col(c), self(col(c)), 0
		// the nearest column the same, one run, is what the search below
		// would end with (only a column the same is one run, unless a is
		// one run itself): found without counting runs
		for k := 1; k <= min(previewRefs, c) && best > 1; k++ {
			if slices.Equal(a, col(c-k)) {
				best, bk = 1, k
			}
		}
		for k := 1; k <= min(previewRefs, c) && best > 1; k++ {
			if n := runs(a, col(c-k), best-1); n < best {
				best, bk = n, k
			}
		}
		var ref []int32
		if bk > 0 {
			ref = col(c - bk)
		}
		out.add(int64(bk), false)
		for r := 0; r < len(a); {
			k := r + 1
			if ref != nil && a[r] == ref[r] {
				for k < len(a) && a[k] == ref[k] {
					k++
				}
				out.add(0, false)
			} else {
				for k < len(a) && a[k] == a[r] && (ref == nil || a[k] != ref[k]) {
					k++
				}
				out.add(int64(a[r])+1, false)
			}
			out.add(int64(k-r), false)
			r = k
		}
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

type exFirstMap struct {
	Op     int        `json:"op"`
	Blocks [][6]int64 `json:"blocks"`
}
