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
	lt := lifetimes(ops)
	n := len(lt)
	if n == 0 {
		return 0
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
	tree := newStabTree(T)
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
	return peak
}

// stabTree is a segment tree over op indexes: each node keeps the
// allocations whose lifetime covers its whole range, so the allocations live
// at one index are those on the path from the root to its leaf.
type stabTree struct {
	size  int
	nodes [][]int32
}

func newStabTree(n int) *stabTree {
	size := 1
	for size < n {
		size *= 2
	}
	return &stabTree{size: size, nodes: make([][]int32, 2*size)}
}

// add records allocation id over [lo, hi).
func (t *stabTree) add(lo, hi int, id int32) {
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
func (t *stabTree) stab(i int, out []int32) []int32 {
	for k := i + t.size; k >= 1; k /= 2 {
		out = append(out, t.nodes[k]...)
	}
	return out
}
