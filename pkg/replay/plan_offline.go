package replay

import (
	"cmp"
	"slices"

	"github.com/gpumem/gpumem/pkg/alloc"
)

// lifetime is one allocation of an op stream: its rounded size and the ops
// at which it starts and stops occupying memory.
type lifetime struct {
	size       uint64
	start, end int32 // [start, end) in op indexes
}

// lifetimes reads the allocations of ops. An allocation occupies memory from
// its OpAlloc to its OpFree or OpFreeComplete (an OpFreeRequest leaves it in
// use), or to the end when it is never freed. Sizes are rounded up to 512 B,
// as the lower bound counts them; zero-byte allocations take no memory.
func lifetimes(ops []alloc.Op) []lifetime {
	var out []lifetime
	live := map[uint32]int{}
	for i, op := range ops {
		switch op.Kind {
		case alloc.OpAlloc:
			if op.Size == 0 {
				continue
			}
			live[op.ID] = len(out)
			out = append(out, lifetime{size: (op.Size + 511) / 512 * 512, start: int32(i), end: int32(len(ops))})
		case alloc.OpFree, alloc.OpFreeComplete:
			if k, ok := live[op.ID]; ok {
				out[k].end = int32(i)
				delete(live, op.ID)
			}
		}
	}
	return out
}

// OfflinePeak is the peak memory of an offline plan of ops: a planner that
// knows every allocation's size and lifetime in advance and gives each a
// fixed address in one flat range. It places allocations largest first
// (the longer-lived first among equals) at the lowest address free for
// their whole lifetime, the "greedy by size" planner of TensorFlow Lite and
// similar static memory planners. No online allocator can know what it
// knows; it shows how much of a policy's waste is avoidable on this trace
// without virtual memory. It is a heuristic, not an optimum (the problem is
// NP-hard), and never below the lower bound (the peak of live bytes).
// Allocations live before the stream starts (a truncated trace's seeds) are
// not counted.
func OfflinePeak(ops []alloc.Op) uint64 {
	_, peak := offlinePlace(lifetimes(ops), len(ops))
	return peak
}

// span is the address range [lo, hi) a placed allocation occupies.
type span struct{ lo, hi uint64 }

// offlinePlace places lt greedy by size and returns each allocation's offset
// and the peak. An allocation conflicts with the placed ones live at its
// start (found in the stabbing tree, whose lists are kept in address order)
// and with the placed ones starting inside its lifetime (found in a second
// tree keyed by start); firstFit walks these sorted lists together, so
// nothing is sorted per allocation.
func offlinePlace(lt []lifetime, nOps int) ([]uint64, uint64) {
	n := len(lt)
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
	tree := newStabTree(nOps + 1)   // placed allocations by lifetime
	starts := newStabTree(nOps + 1) // placed allocations by start
	levels := startLevels(starts.size)
	placed := make([]bool, n)
	offset := make([]uint64, n)
	var peak uint64
	var lists [][]span
	var pos []int
	for _, i := range order {
		l := &lt[i]
		lists = tree.stab(int(l.start), lists[:0])
		lists = starts.within(int(l.start)+1, int(l.end), levels, lists)
		pos = slices.Grow(pos[:0], len(lists))[:len(lists)]
		clear(pos)
		at := firstFit(lists, pos, l.size)
		offset[i] = at
		placed[i] = true
		peak = max(peak, at+l.size)
		tree.add(int(l.start), int(l.end), span{at, at + l.size})
		starts.addPoint(int(l.start), levels, span{at, at + l.size})
	}
	return offset, peak
}

// firstFit is the lowest address at which size bytes overlap none of the
// spans of lists, each sorted by lo (pos is a zeroed cursor per list). Every
// address below at is taken (a consumed span starts below at+size and ends
// at or below at), so at only rises; when no list has a span starting below
// at+size left, [at, at+size) is free. Each span is consumed once.
func firstFit(lists [][]span, pos []int, size uint64) uint64 {
	var at uint64
	for moved := true; moved; {
		moved = false
		for k, s := range lists {
			p := pos[k]
			for p < len(s) && s[p].lo < at+size {
				at = max(at, s[p].hi)
				p++
			}
			if p != pos[k] {
				pos[k], moved = p, true
			}
		}
	}
	return at
}

// stabTree is a segment tree over op indexes: each node keeps the placed
// allocations whose lifetime covers its whole range, sorted by address, so
// the allocations live at one index are those on the path from the root to
// its leaf.
type stabTree struct {
	size  int
	nodes [][]span
}

func newStabTree(n int) *stabTree {
	size := 1
	for size < n {
		size *= 2
	}
	return &stabTree{size: size, nodes: make([][]span, 2*size)}
}

// add records the placed span s over [lo, hi).
func (t *stabTree) add(lo, hi int, s span) {
	for lo, hi = lo+t.size, hi+t.size; lo < hi; lo, hi = lo/2, hi/2 {
		if lo&1 == 1 {
			t.insert(lo, s)
			lo++
		}
		if hi&1 == 1 {
			hi--
			t.insert(hi, s)
		}
	}
}

func (t *stabTree) insert(node int, s span) {
	at, _ := slices.BinarySearchFunc(t.nodes[node], s.lo, func(e span, lo uint64) int { return cmp.Compare(e.lo, lo) })
	t.nodes[node] = slices.Insert(t.nodes[node], at, s)
}

// stab appends the non-empty lists of the nodes covering index i to out.
func (t *stabTree) stab(i int, out [][]span) [][]span {
	for k := i + t.size; k >= 1; k /= 2 {
		if len(t.nodes[k]) > 0 {
			out = append(out, t.nodes[k])
		}
	}
	return out
}

// startLevels is how many levels of a tree keyed by start hold lists: the
// widest nodes kept split the ops into at most 64 ranges. Wider nodes would
// hold most of the placed spans, each insertion moving them all.
func startLevels(size int) int {
	h := 0
	for size>>h > 64 {
		h++
	}
	return h
}

// addPoint records the placed span s at index i, in its leaf and the nodes
// above it up to the level `levels`.
func (t *stabTree) addPoint(i, levels int, s span) {
	for k, h := i+t.size, 0; h <= levels; k, h = k/2, h+1 {
		t.insert(k, s)
	}
}

// within appends the non-empty lists of the nodes that make up [lo, hi),
// none above the level `levels`, to out: together they hold each span added
// at an index in [lo, hi) once.
func (t *stabTree) within(lo, hi, levels int, out [][]span) [][]span {
	lo, hi = lo+t.size, hi+t.size
	for h := 0; lo < hi; lo, hi, h = lo/2, hi/2, h+1 {
		if h == levels { // the widest kept: take every node left
			for k := lo; k < hi; k++ {
				if len(t.nodes[k]) > 0 {
					out = append(out, t.nodes[k])
				}
			}
			break
		}
		if lo&1 == 1 {
			if len(t.nodes[lo]) > 0 {
				out = append(out, t.nodes[lo])
			}
			lo++
		}
		if hi&1 == 1 {
			hi--
			if len(t.nodes[hi]) > 0 {
				out = append(out, t.nodes[hi])
			}
		}
	}
	return out
}
