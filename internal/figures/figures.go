// Package figures holds what a replay measured (Replay, the data every
// renderer reads) and computes, once, the figures derived from it:
// fragmentation ratios, the distance to the lower bound, the verdict on an
// out-of-memory error, and byte counts as people read them. It works on the
// allocator's typed statistics (alloc.Stats); nothing here renders.
package figures

import (
	"math"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// Fragmentation holds the fragmentation ratios of a replay; each is NaN
// when its denominator is zero.
type Fragmentation struct {
	End    float64 // 1 − allocated/reserved at the end
	AtPeak float64 // 1 − allocated/reserved when reserved peaked
	Peaks  float64 // 1 − peak allocated/peak reserved
	Holes  float64 // 1 − largest free block/cached free bytes, at the end
}

// FragmentationOf computes the ratios from the statistics at the end, the
// allocated bytes when reserved memory peaked, and the largest free cached
// block at the end.
func FragmentationOf(s alloc.Stats, allocatedAtPeak int64, largestFree uint64) Fragmentation {
	return Fragmentation{
		End:    oneMinus(s.AllocatedBytes[alloc.All].Current, s.ReservedBytes[alloc.All].Current),
		AtPeak: oneMinus(allocatedAtPeak, s.ReservedBytes[alloc.All].Peak),
		Peaks:  oneMinus(s.AllocatedBytes[alloc.All].Peak, s.ReservedBytes[alloc.All].Peak),
		Holes:  oneMinus(int64(min(largestFree, math.MaxInt64)), CachedFree(s)),
	}
}

// CachedFree is the bytes of free cached blocks: reserved minus active
// memory. Blocks freed but still pending on other streams are active, not
// free, because they cannot be reused yet.
func CachedFree(s alloc.Stats) int64 {
	return s.ReservedBytes[alloc.All].Current - s.ActiveBytes[alloc.All].Current
}

// PeakReserved is reserved_bytes.all.peak.
func PeakReserved(s alloc.Stats) int64 { return s.ReservedBytes[alloc.All].Peak }

// PeakAllocated is allocated_bytes.all.peak.
func PeakAllocated(s alloc.Stats) int64 { return s.AllocatedBytes[alloc.All].Peak }

// OverBound is peak reserved memory divided by the lower bound, or NaN
// without a lower bound.
func OverBound(peakReserved, lowerBound int64) float64 {
	if lowerBound <= 0 {
		return math.NaN()
	}
	return float64(peakReserved) / float64(lowerBound)
}

// Fragmentation computes r's ratios.
func (r *Replay) Fragmentation() Fragmentation {
	return FragmentationOf(r.Stats, r.PeakAllocatedAtPeakReserved, r.LargestFree)
}

// CachedFree is the bytes of free cached blocks at the end.
func (r *Replay) CachedFree() int64 { return CachedFree(r.Stats) }

// OverLowerBound is peak reserved memory divided by the lower bound, or NaN
// without a lower bound.
func (r *Replay) OverLowerBound() float64 {
	return OverBound(PeakReserved(r.Stats), int64(min(r.LowerBound, math.MaxInt64)))
}

func oneMinus(num, den int64) float64 {
	if den == 0 {
		return math.NaN()
	}
	return 1 - float64(num)/float64(den)
}

// Headroom is what the device would still hand out: the smaller of the
// card's free bytes and what the cap leaves above reserved memory.
func (o *OOM) Headroom() uint64 {
	h := o.DeviceFree
	if o.Allowed > 0 {
		var left uint64
		if o.Reserved >= 0 && uint64(o.Reserved) < o.Allowed {
			left = o.Allowed - uint64(o.Reserved)
		}
		h = min(h, left)
	}
	return h
}

// Fragmented reports whether this is a fragmentation OOM: the free cached
// bytes and the headroom together would hold the rounded request, yet the
// allocation failed, so no free block (usable on its stream) and no new
// segment was big enough. Otherwise the memory really is short.
func (o *OOM) Fragmented() bool {
	return Sat(o.CachedFree, o.Headroom()) >= o.Rounded
}

// Verdict is "fragmentation OOM" or "real shortage".
func (o *OOM) Verdict() string {
	if o.Fragmented() {
		return "fragmentation OOM"
	}
	return "real shortage"
}

// Sat adds without wrapping around.
func Sat(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}
