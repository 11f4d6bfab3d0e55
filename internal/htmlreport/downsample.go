package htmlreport

import (
	"slices"

	"github.com/gpumem/gpumem/internal/figures"
)

// MaxPoints is the most timeline points a report draws.
const MaxPoints = 6000

// Downsample thins a timeline to at most limit points (limit ≥ 8). It cuts
// the timeline into equal stretches and keeps, from each, the points where
// allocated, active and reserved memory are lowest and highest, plus the
// first and last point, so peaks and troughs survive. Shorter timelines
// come back as they are.
func Downsample(pts []figures.Point, limit int) []figures.Point {
	idx := keep(pts, limit)
	if idx == nil {
		return pts
	}
	out := make([]figures.Point, len(idx))
	for i, k := range idx {
		out[i] = pts[k]
	}
	return out
}

// keep returns the indexes of the points Downsample keeps, in order, or nil
// when it keeps them all.
func keep(pts []figures.Point, limit int) []int {
	limit = max(limit, 8)
	if len(pts) <= limit {
		return nil
	}
	// each stretch gives at most six points; the ends add two
	buckets := (limit - 2) / 6
	idx := make([]int, 0, limit)
	idx = append(idx, 0)
	series := [...]func(p figures.Point) int64{
		func(p figures.Point) int64 { return p.Allocated },
		func(p figures.Point) int64 { return p.Active },
		func(p figures.Point) int64 { return p.Reserved },
	}
	var local []int
	for b := range buckets {
		lo := b * len(pts) / buckets
		hi := (b + 1) * len(pts) / buckets
		local = local[:0]
		for _, v := range series {
			mn, mx := lo, lo
			for i := lo + 1; i < hi; i++ {
				if x := v(pts[i]); x < v(pts[mn]) {
					mn = i
				} else if x > v(pts[mx]) {
					mx = i
				}
			}
			local = append(local, mn, mx)
		}
		slices.Sort(local)
		idx = append(idx, slices.Compact(local)...)
	}
	idx = append(idx, len(pts)-1)
	return slices.Compact(idx)
}
