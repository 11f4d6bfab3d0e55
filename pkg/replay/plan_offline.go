package replay

import (
	"cmp"
	"math/bits"
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
	_, peak := offlinePlace(lifetimes(ops))
	return peak
}

// span is the address range [lo, hi) a placed allocation occupies.
type span struct{ lo, hi uint64 }

// offlinePlace places lt greedy by size and returns each allocation's offset
// and the peak. Time is counted in allocation starts: lifetimes are in start
// order and no two start at the same op, so allocation j is live at i's
// start when j <= i < endRank[j], and starts inside i's lifetime when
// i < j < endRank[i]. An allocation conflicts with the placed ones live at
// its start (a stabbing tree) and those starting inside its lifetime (a
// tree keyed by start); both keep their lists in address order, and
// merger.firstFit merges them, so nothing is sorted per allocation.
func offlinePlace(lt []lifetime) ([]uint64, uint64) {
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
	endRank := make([]int32, n) // allocations starting before j's end
	for j := range lt {
		k, _ := slices.BinarySearchFunc(lt[j+1:], lt[j].end, func(l lifetime, end int32) int { return cmp.Compare(l.start, end) })
		endRank[j] = int32(j + 1 + k)
	}
	// The start tree's leaves are buckets of startBucket allocations and
	// its widest nodes 16 buckets: an insertion then moves at most a few
	// thousand spans, and a query scans at most two part buckets itself.
	const startBucket = 64
	live := newStabTree(n)                                     // placed allocations over their lifetimes
	starts := newStabTree((n + startBucket - 1) / startBucket) // placed allocations at their starts
	top := min(4, bits.Len(uint(starts.size))-1)
	// Every span goes where its lifetime says, whatever its address: the
	// lists are sized to hold them all before the first is placed.
	for i := range lt {
		live.count(i, int(endRank[i]))
		starts.countPoint(i/startBucket, top)
	}
	live.reserve()
	starts.reserve()
	placed := make([]bool, n)
	offset := make([]uint64, n)
	var peak uint64
	var lists [][]span
	var edge []span
	var m merger
	scan := func(lo, hi int) { // the placed allocations in [lo, hi)
		for j := lo; j < hi; j++ {
			if placed[j] {
				edge = append(edge, span{offset[j], offset[j] + lt[j].size})
			}
		}
	}
	for _, i := range order {
		size := lt[i].size
		lists = live.stab(int(i), lists[:0])
		lo, hi := int(i)+1, int(endRank[i])
		bLo, bHi := (lo+startBucket-1)/startBucket, hi/startBucket
		edge = edge[:0]
		if bLo >= bHi {
			scan(lo, hi)
		} else {
			scan(lo, bLo*startBucket)
			scan(bHi*startBucket, hi)
			lists = starts.within(bLo, bHi, top, lists)
		}
		if len(edge) > 0 {
			sortByLo(edge)
			lists = append(lists, edge)
		}
		at := m.firstFit(lists, size)
		offset[i] = at
		placed[i] = true
		peak = max(peak, at+size)
		live.add(int(i), int(endRank[i]), span{at, at + size})
		starts.addPoint(int(i)/startBucket, top, span{at, at + size})
	}
	return offset, peak
}

// sortByLo sorts spans by lo. It is a plain quicksort, written out because
// the generic sort's comparison closure cost a fifth of the planner; its
// input is at most two part buckets (2*startBucket spans), so its worst
// case stays small.
func sortByLo(s []span) {
	for len(s) > 12 {
		// median of three as the pivot, moved to s[0]
		m, last := len(s)/2, len(s)-1
		if s[m].lo < s[0].lo {
			s[m], s[0] = s[0], s[m]
		}
		if s[last].lo < s[0].lo {
			s[last], s[0] = s[0], s[last]
		}
		if s[last].lo < s[m].lo {
			s[last], s[m] = s[m], s[last]
		}
		s[0], s[m] = s[m], s[0]
		p := s[0].lo
		i, j := 1, last
		for {
			for i <= j && s[i].lo < p {
				i++
			}
			for i <= j && s[j].lo > p {
				j--
			}
			if i >= j {
				break
			}
			s[i], s[j] = s[j], s[i]
			i++
			j--
		}
		s[0], s[j] = s[j], s[0]
		// recurse on the smaller side, loop on the larger
		if j < len(s)-j {
			sortByLo(s[:j])
			s = s[j+1:]
		} else {
			sortByLo(s[j+1:])
			s = s[:j]
		}
	}
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].lo < s[j-1].lo; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// merger walks several address-ordered span lists as one.
type merger struct {
	heap []cursor // min-heap on lo
	pos  []int    // next span of each list
}

// cursor is list k's next span's lo, kept in the heap so that ordering it
// reads no list.
type cursor struct {
	lo uint64
	k  int
}

// firstFit is the lowest address at which size bytes overlap none of the
// spans of lists, each sorted by lo. It walks the spans in address order,
// a list's run at a time: every address below at is taken, since a span
// met starts below at+size and at rises to its end; the first span
// starting at or above at+size leaves [at, at+size) free.
func (m *merger) firstFit(lists [][]span, size uint64) uint64 {
	m.heap, m.pos = m.heap[:0], m.pos[:0]
	for k, l := range lists {
		m.pos = append(m.pos, 0)
		if len(l) > 0 {
			m.heap = append(m.heap, cursor{l[0].lo, k})
		}
	}
	h := m.heap
	for k := len(h)/2 - 1; k >= 0; k-- {
		siftDown(h, k)
	}
	var at uint64
	for len(h) > 0 && h[0].lo < at+size {
		k := h[0].k
		l, p := lists[k], m.pos[k]
		// this list's run of spans starting below at+size, at once: the
		// merge would take each of them before any span starting above
		// the address it settles on, so their order does not matter
		for ; p < len(l) && l[p].lo < at+size; p++ {
			at = max(at, l[p].hi)
		}
		if p < len(l) {
			m.pos[k], h[0].lo = p, l[p].lo
		} else {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		siftDown(h, 0)
	}
	return at
}

// siftDown restores the heap order of h below k.
func siftDown(h []cursor, k int) {
	for {
		c := 2*k + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].lo < h[c].lo {
			c++
		}
		if h[k].lo <= h[c].lo {
			return
		}
		h[k], h[c] = h[c], h[k]
		k = c
	}
}

// stabTree is a segment tree over allocation starts: each node keeps the placed
// allocations whose lifetime covers its whole range, sorted by address, so
// the allocations live at one index are those on the path from the root to
// its leaf.
type stabTree struct {
	size  int
	nodes [][]span
	want  []int32 // spans each node's list will hold (count, countPoint)
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

// count notes a span that add will record over [lo, hi), for reserve.
func (t *stabTree) count(lo, hi int) {
	if t.want == nil {
		t.want = make([]int32, len(t.nodes))
	}
	for lo, hi = lo+t.size, hi+t.size; lo < hi; lo, hi = lo/2, hi/2 {
		if lo&1 == 1 {
			t.want[lo]++
			lo++
		}
		if hi&1 == 1 {
			hi--
			t.want[hi]++
		}
	}
}

// countPoint notes a span that addPoint will record at index i up to the
// level `levels`, for reserve.
func (t *stabTree) countPoint(i, levels int) {
	if t.want == nil {
		t.want = make([]int32, len(t.nodes))
	}
	for k, h := i+t.size, 0; h <= levels; k, h = k/2, h+1 {
		t.want[k]++
	}
}

// reserve gives each node's list room for the spans counted, all in one
// array: the lists then grow without being copied, and the planner asks
// the heap for the memory it keeps and no more (the lists' doubling left
// as much behind as they kept, fresh pages that cost faults).
func (t *stabTree) reserve() {
	total := 0
	for _, w := range t.want {
		total += int(w)
	}
	all := make([]span, total)
	for k, w := range t.want {
		t.nodes[k], all = all[:0:w], all[w:]
	}
	t.want = nil
}

func (t *stabTree) insert(node int, s span) {
	l := t.nodes[node]
	// the first span at or above s.lo, searched by hand: this is the
	// planner's hottest loop, and a comparison closure costs a third of it
	at, hi := 0, len(l)
	for at < hi {
		m := int(uint(at+hi) >> 1)
		if l[m].lo < s.lo {
			at = m + 1
		} else {
			hi = m
		}
	}
	l = append(l, span{})
	copy(l[at+1:], l[at:])
	l[at] = s
	t.nodes[node] = l
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
