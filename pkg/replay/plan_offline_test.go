package replay

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// offlinePeakReference is the first offline planner, kept to check that the
// faster one places every allocation at the same offset: it gathers each
// allocation's conflicts and sorts them by offset.
func offlinePeakReference(ops []alloc.Op) ([]uint64, uint64) {
	lt := lifetimes(ops)
	n := len(lt)
	if n == 0 {
		return nil, 0
	}
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(x, y int32) int {
		a, b := &lt[x], &lt[y]
		if c := cmp.Compare(b.size, a.size); c != 0 {
			return c
		}
		if c := cmp.Compare(b.end-b.start, a.end-a.start); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
	// byStart lists allocations by start; an allocation overlapping [s, e)
	// either covers s (found by the stabbing tree) or starts inside (s, e).
	byStart := make([]int32, n)
	for i := range byStart {
		byStart[i] = int32(i) // lifetimes are already in start order
	}
	T := len(ops) + 1
	tree := newRefStabTree(T)
	placed := make([]bool, n)
	offset := make([]uint64, n)
	var peak uint64
	var conf []int32
	for _, i := range order {
		l := &lt[i]
		conf = tree.stab(int(l.start), conf[:0])
		lo, _ := slices.BinarySearchFunc(byStart, l.start+1, func(j int32, s int32) int { return cmp.Compare(lt[j].start, s) })
		for _, j := range byStart[lo:] {
			if lt[j].start >= l.end {
				break
			}
			if placed[j] {
				conf = append(conf, j)
			}
		}
		slices.SortFunc(conf, func(x, y int32) int { return cmp.Compare(offset[x], offset[y]) })
		var at uint64
		for _, j := range conf {
			if offset[j] >= at+l.size {
				break
			}
			at = max(at, offset[j]+lt[j].size)
		}
		offset[i] = at
		placed[i] = true
		peak = max(peak, at+l.size)
		tree.add(int(l.start), int(l.end), i)
	}
	return offset, peak
}

// refStabTree is a segment tree over op indexes: each node keeps the
// allocations whose lifetime covers its whole range, so the allocations live
// at one index are those on the path from the root to its leaf.
type refStabTree struct {
	size  int
	nodes [][]int32
}

func newRefStabTree(n int) *refStabTree {
	size := 1
	for size < n {
		size *= 2
	}
	return &refStabTree{size: size, nodes: make([][]int32, 2*size)}
}

// add records allocation id over [lo, hi).
func (t *refStabTree) add(lo, hi int, id int32) {
	for lo, hi = lo+t.size, hi+t.size; lo < hi; lo, hi = lo/2, hi/2 {
		if lo&1 == 1 {
			t.nodes[lo] = append(t.nodes[lo], id)
			lo++
		}
		if hi&1 == 1 {
			hi--
			t.nodes[hi] = append(t.nodes[hi], id)
		}
	}
}

// stab appends the allocations covering index i to out.
func (t *refStabTree) stab(i int, out []int32) []int32 {
	for k := i + t.size; k >= 1; k /= 2 {
		out = append(out, t.nodes[k]...)
	}
	return out
}

// sameAsReference checks that the planner places every allocation of ops
// where the reference does.
func sameAsReference(t *testing.T, name string, ops []alloc.Op) {
	t.Helper()
	wantOff, wantPeak := offlinePeakReference(ops)
	gotOff, gotPeak := offlinePlace(lifetimes(ops))
	if gotPeak != wantPeak || OfflinePeak(ops) != wantPeak {
		t.Fatalf("%s: offline peak %d, reference %d", name, gotPeak, wantPeak)
	}
	for i := range wantOff {
		if gotOff[i] != wantOff[i] {
			t.Fatalf("%s: allocation %d at %d, reference at %d", name, i, gotOff[i], wantOff[i])
		}
	}
}

func TestOfflinePlaceMatchesReference(t *testing.T) {
	for _, f := range loadFixtures(t) {
		sameAsReference(t, f.name, f.plan.Ops)
	}
	// random lifetimes: few sizes (many ties), frees in any order, some
	// never freed, zero-byte allocations and deferred frees
	rng := rand.New(rand.NewPCG(18, 1))
	for round := range 300 {
		var ops []alloc.Op
		var live []uint32
		next := uint32(0)
		for range 1 + rng.IntN(400) {
			if len(live) > 0 && rng.IntN(2) == 0 {
				k := rng.IntN(len(live))
				kind := alloc.OpFree
				if rng.IntN(8) == 0 {
					kind = alloc.OpFreeComplete
				}
				ops = append(ops, alloc.Op{Kind: kind, ID: live[k]})
				live = slices.Delete(live, k, k+1)
				continue
			}
			size := uint64(rng.IntN(5)) * 1000
			if rng.IntN(4) == 0 {
				size = uint64(rng.IntN(1 << 22))
			}
			ops = append(ops, alloc.Op{Kind: alloc.OpAlloc, ID: next, Size: size})
			live = append(live, next)
			next++
		}
		sameAsReference(t, fmt.Sprintf("random %d", round), ops)
	}
}

func BenchmarkOfflinePeak(b *testing.B) {
	f := loadFixtures(b)
	for _, x := range f {
		if x.name != "gpt2_varlen" {
			continue
		}
		b.Run("fast", func(b *testing.B) {
			for b.Loop() {
				OfflinePeak(x.plan.Ops)
			}
		})
		b.Run("reference", func(b *testing.B) {
			for b.Loop() {
				offlinePeakReference(x.plan.Ops)
			}
		})
	}
}

func TestSortByLo(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for n := range 300 {
		s := make([]span, n)
		for i := range s {
			s[i] = span{lo: uint64(rng.IntN(1 + n/3)), hi: uint64(i)}
		}
		if n%5 == 0 {
			slices.SortFunc(s, func(a, b span) int { return cmp.Compare(b.lo, a.lo) }) // descending
		}
		sortByLo(s)
		if !slices.IsSortedFunc(s, func(a, b span) int { return cmp.Compare(a.lo, b.lo) }) {
			t.Fatalf("%d spans: not sorted: %v", n, s)
		}
		got := slices.Clone(s)
		slices.SortFunc(got, func(a, b span) int { return cmp.Compare(a.hi, b.hi) })
		for i := range got {
			if got[i].hi != uint64(i) {
				t.Fatalf("%d spans: lost or duplicated a span", n)
			}
		}
	}
}

// TestStabTreeReserve checks that count and countPoint size every list
// for exactly the spans add and addPoint then put there.
func TestStabTreeReserve(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, n := range []int{1, 2, 7, 64, 1000} {
		type iv struct{ lo, hi int }
		var ivs []iv
		for range 3 * n {
			lo := rng.IntN(n)
			ivs = append(ivs, iv{lo, lo + 1 + rng.IntN(n-lo)})
		}
		live, points := newStabTree(n), newStabTree(n)
		const levels = 3
		for _, v := range ivs {
			live.count(v.lo, v.hi)
			points.countPoint(v.lo, levels)
		}
		live.reserve()
		points.reserve()
		for k, v := range ivs {
			s := span{uint64(rng.IntN(100)), uint64(k)}
			live.add(v.lo, v.hi, s)
			points.addPoint(v.lo, levels, s)
		}
		for name, tr := range map[string]*stabTree{"live": live, "points": points} {
			for k, l := range tr.nodes {
				if len(l) != cap(l) {
					t.Fatalf("n=%d %s node %d: %d spans in a list reserved for %d", n, name, k, len(l), cap(l))
				}
			}
		}
	}
}
